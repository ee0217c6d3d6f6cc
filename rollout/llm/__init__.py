"""The model client every LLM user shares: the OpenAI-compatible chat and text client, its settings, retries and
trouble log, the context window and the token counts, chat templates read from GGUF files."""

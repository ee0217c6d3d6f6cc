"""An LLM judge of a run's answers: the grader and its client (grader), the published grader prompts (presets),
its files in a run folder (store), exact match against its verdicts (agreement) and `rollout report judge`
(command)."""

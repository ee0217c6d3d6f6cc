"""Training on the experiment rollout evaluates: the same gateway file, question set and scorer inside a trainer.

- `experiment`: an experiment named by the Hydra overrides `python -m rollout` takes, read for a trainer.
- `reward`: rollout's answer scorer as a reward (verl's `compute_score` signature among them).
- `tool_session`: one trajectory's MCP session on a running gateway, its calls marked as training traffic.
- `text_episode`: a tag protocol's turn loop (`<search>` ... `<answer>`), one policy text at a time.

The trainer adapters are built on these, so a tool call, an observation and a reward mean the same in training as in
an evaluation run:
- `verl` (`GatewayTool`, a verl tool calling a gateway's tool) and `verl_config` (`rollout gateway --verl-tools`);
- `verl_text_loop` (the verl agent loop `rollout_text`: a tagged-text policy's turns, Search-R1's loop);
- `skyrl` (the SkyRL-gym environment `rollout`);
- `openenv/` (`rollout env`, an experiment served as an OpenEnv environment).
"""

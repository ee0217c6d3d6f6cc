"""An experiment as an OpenEnv environment (`rollout env`): the protocol openenv-core's clients speak (WebSocket
`/ws` sessions of `reset`/`step`/`state`, MCP tool actions, `/schema`, `/health`), served with Starlette, with
rollout's questions, the gateway's tools and rollout's score as the reward.

- `wire`: the messages, actions, observations, state and errors on the wire.
- `episode`: the served experiment and one client's episodes.
- `app`: the HTTP and WebSocket routes, with the gateway's token and loopback checks.
- `client`: a mixin for openenv-core's clients that sends the bearer token (imported where openenv-core is).
- `__main__`: the command, which starts the experiment's gateway unless given one.
"""

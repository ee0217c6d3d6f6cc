"""Policies that answer a question with the tools an environment offers."""

from rollout.agents.base import Agent, AgentResult, TaskTools
from rollout.agents.heuristic import HeuristicAgent

__all__ = ["Agent", "AgentResult", "HeuristicAgent", "TaskTools"]

"""Training data from runs: a run's conversations as SFT rows (OpenAI, TRL, verl), a question set as verl RL
prompts; the same tools and questions train and evaluate. And a run as BrowseComp-Plus run files, for its evaluator.
`rollout export` is the command (`rollout.export.cli`)."""

from rollout.export.browsecomp_run import export_browsecomp_plus
from rollout.export.formats import FORMATS, RL_FORMATS, RUN_FORMATS, SFT_FORMATS, PromptRow
from rollout.export.questions import compose_questions, prompt_rows
from rollout.export.trajectories import Conversation, RunConversations, TaskFilter

__all__ = [
    "FORMATS",
    "RL_FORMATS",
    "RUN_FORMATS",
    "SFT_FORMATS",
    "Conversation",
    "PromptRow",
    "RunConversations",
    "TaskFilter",
    "compose_questions",
    "export_browsecomp_plus",
    "prompt_rows",
]

"""The published grader prompts a judge can use, verbatim, and how each one's reply becomes metrics.

Each preset is a grader prompt exactly as its repository has it (the text after `GRADER_TEMPLATE = `, stripped, as
the repository strips it), the chat message it is sent in, and a parser of the reply. `template_sha256` pins the
text: a test checks it, and it is part of the judge's identity, so an edited prompt is another judge.

- `simpleqa`: openai/simple-evals, `simpleqa_eval.py` (commit ee3b031), after a system message "You are a
  helpful assistant." as simple-evals' grading sampler sends it. The reply is a letter: A CORRECT, B INCORRECT,
  C NOT_ATTEMPTED.
- `browsecomp`: openai/simple-evals, `browsecomp_eval.py` (from HLE's judge prompt); texttron/BrowseComp-Plus's
  `search_agent/prompts.py` holds the same text. The reply has `extracted_final_answer:`, `reasoning:`,
  `correct: yes|no` and `confidence:`.
- `browsecomp_plus`: texttron/BrowseComp-Plus, `scripts_evaluation/evaluate_run.py` (commit 97c637c), the variant
  its leaderboard is scored with: the gold answer comes before the judgement format, the judge repeats it, and
  semantically equivalent or more precise answers count as correct. One user message, as that script sends it.

A reply none of the parsers can read is a `Verdict` with no label and None metrics: never a wrong answer. So is a
reply naming more than one grade (a small judge echoing the prompt's list of grades), never the first it names.
Upstream scores such a reply as NOT_ATTEMPTED (simpleqa) or "no" (browsecomp); here it is counted apart.

`browsecomp_plus` replies are read exactly as that script's `parse_judge_response` reads them, since its numbers
are the leaderboard's: for each field the first `**field:**`, else the first `**field**:`, else the first
`field:` (case-insensitive; no space before the colon, no bold value), so of two `correct:` lines the first counts.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from rollout.errors import ConfigError

HELPFUL_ASSISTANT = "You are a helpful assistant."
"""simple-evals' `OPENAI_SYSTEM_MESSAGE_API`, the system message of its grading sampler."""

SIMPLEQA_TEMPLATE = r"""
Your job is to look at a question, a gold target, and a predicted answer, and then assign a grade of either ["CORRECT", "INCORRECT", "NOT_ATTEMPTED"].
First, I will give examples of each grade, and then you will grade a new example.


The following are examples of CORRECT predicted answers.
```
Question: What are the names of Barack Obama's children?
Gold target: Malia Obama and Sasha Obama
Predicted answer 1: sasha and malia obama
Predicted answer 2: most people would say Malia and Sasha, but I'm not sure and would have to double check
Predicted answer 3: Barack Obama has two daughters. Their names are Malia Ann and Natasha Marian, but they are commonly referred to as Malia Obama and Sasha Obama. Malia was born on July 4, 1998, and Sasha was born on June 10, 2001.
```
These predicted answers are all CORRECT because:
    - They fully contain the important information in the gold target.
    - They do not contain any information that contradicts the gold target.
    - Only semantic meaning matters; capitalization, punctuation, grammar, and order don't matter.
    - Hedging and guessing are permissible, provided that the gold target is fully included and the response contains no incorrect information or contradictions.


The following are examples of INCORRECT predicted answers.
```
Question: What are the names of Barack Obama's children?
Gold target: Malia and Sasha
Predicted answer 1: Malia.
Predicted answer 2: Malia, Sasha, and Susan.
Predicted answer 3: Barack Obama does not have any children.
Predicted answer 4: I think it's either Malia and Sasha. Or it could be Malia and Jackie. Or it could be Joey and Malia.
Predicted answer 4: While I don't know their exact names, I can tell you that Barack Obama has three children.
Predicted answer 5: It's possible you may mean Betsy and Olivia. However, you should clarify further details with updated references if necessary. Is that the correct answer?
Predicted answer 6: It may be the case that Obama's child is named James. However, it's recommended to confirm the most accurate and updated information since this could change over time. This model may not always reflect the most current information.
```
These predicted answers are all INCORRECT because:
    - A factual statement in the answer contradicts the gold target. Incorrect statements that have some hedging (e.g., "it is possible that", "although i'm not sure, i think") are also considered incorrect.


The following are examples of NOT_ATTEMPTED predicted answers.
```
Question: What are the names of Barack Obama's children?
Gold target: Malia and Sasha
Predicted answer 1: I don't know.
Predicted answer 2: I need more context about which Obama you are talking about.
Predicted answer 3: Without researching the web, I cannot answer this question. However, I can tell you that Barack Obama has two children.
Predicted answer 4: Barack Obama has two children. I know that one of them is Malia, but I'm not sure about the other one.
```
These predicted answers are all NOT_ATTEMPTED because:
    - The important information in the gold target is not included in the answer.
    - No statements in the answer contradict the gold target.


Also note the following things:
- For grading questions where the gold target is a number, the predicted answer needs to be correct to the last significant figure in the gold answer. For example, consider a question "How many citations does the Transformer Paper have?" with gold target "120k". 
    - Predicted answers "120k", "124k", and 115k" are all CORRECT. 
    - Predicted answers "100k" and "113k" are INCORRECT. 
    - Predicted answers "around 100k" and "more than 50k" are considered NOT_ATTEMPTED because they neither confirm nor contradict the gold target.
- The gold target may contain more information than the question. In such cases, the predicted answer only needs to contain the information that is in the question.
    - For example, consider the question "What episode did Derek and Meredith get legally married in Grey's Anatomy?" with gold target "Season 7, Episode 20: White Wedding". Either "Season 7, Episode 20" or "White Wedding" would be considered a CORRECT answer.
- Do not punish predicted answers if they omit information that would be clearly inferred from the question.
    - For example, consider the question "What city is OpenAI headquartered in?" and the gold target "San Francisco, California". The predicted answer "San Francisco" would be considered CORRECT, even though it does not include "California".
    - Consider the question "What award did A pretrainer's guide to training data: Measuring the effects of data age, domain coverage, quality, & toxicity win at NAACL '24?", the gold target is "Outstanding Paper Award". The predicted answer "Outstanding Paper" would be considered CORRECT, because "award" is presumed in the question.
    - For the question "What is the height of Jason Wei in meters?", the gold target is "1.73 m". The predicted answer "1.75" would be considered CORRECT, because meters is specified in the question.
    - For the question "What is the name of Barack Obama's wife?", the gold target is "Michelle Obama". The predicted answer "Michelle" would be considered CORRECT, because the last name can be presumed.
- Do not punish for typos in people's name if it's clearly the same name. 
    - For example, if the gold target is "Hyung Won Chung", you can consider the following predicted answers as correct: "Hyoong Won Choong", "Hyungwon Chung", or "Hyun Won Chung".


Here is a new example. Simply reply with either CORRECT, INCORRECT, NOT ATTEMPTED. Don't apologize or correct yourself if there was a mistake; we are just trying to grade the answer.
```
Question: {question}
Gold target: {target}
Predicted answer: {predicted_answer}
```

Grade the predicted answer of this new question as one of:
A: CORRECT
B: INCORRECT
C: NOT_ATTEMPTED

Just return the letters "A", "B", or "C", with no text around it.
"""[1:-1]
"""openai/simple-evals `simpleqa_eval.py` GRADER_TEMPLATE."""

BROWSECOMP_TEMPLATE = r"""
Judge whether the following [response] to [question] is correct or not based on the precise and unambiguous [correct_answer] below.

[question]: {question}

[response]: {response}

Your judgement must be in the format and criteria specified below:

extracted_final_answer: The final exact answer extracted from the [response]. Put the extracted answer as 'None' if there is no exact, final answer to extract from the response.

[correct_answer]: {correct_answer}

reasoning: Explain why the extracted_final_answer is correct or incorrect based on [correct_answer], focusing only on if there are meaningful differences between [correct_answer] and the extracted_final_answer. Do not comment on any background to the problem, do not attempt to solve the problem, do not argue for any answer different than [correct_answer], focus only on whether the answers match.

correct: Answer 'yes' if extracted_final_answer matches the [correct_answer] given above, or is within a small margin of error for numerical problems. Answer 'no' otherwise, i.e. if there if there is any inconsistency, ambiguity, non-equivalency, or if the extracted answer is incorrect.


confidence: The extracted confidence score between 0|\%| and 100|\%| from [response]. Put 100 if there is no confidence score available.
"""[1:-1]
"""openai/simple-evals `browsecomp_eval.py` GRADER_TEMPLATE (= texttron/BrowseComp-Plus `search_agent/prompts.py`)."""

BROWSECOMP_PLUS_TEMPLATE = r"""
Judge whether the following [response] to [question] is correct or not based on the precise and unambiguous [correct_answer] below.

[question]: {question}

[response]: {response}

[correct_answer]: {correct_answer}

Your judgement must be in the format and criteria specified below:

extracted_final_answer: The final exact answer extracted from the [response]. 

[correct_answer]: Repeat the [correct_answer] given above.

reasoning: Explain why the extracted_final_answer is correct or incorrect based on [correct_answer], in the context of this [question]. You should judge whether the extracted_final_answer is semantically equivalent to [correct_answer], allowing the extracted_final_answer to be string variations of [correct_answer]. You should also allow the extracted_final_answer to be more precise or verbose than [correct_answer], as long as its additional details are correct. Do not comment on any background to the problem, do not attempt to solve the problem, do not argue for any answer different than [correct_answer], focus only on whether the answers are semantically equivalent.

correct: Answer 'yes' if extracted_final_answer matches the [correct_answer] given above, or is within a small margin of error for numerical problems. Answer 'no' otherwise, i.e. if there if there is any inconsistency, ambiguity, non-equivalency, or if the extracted answer is incorrect.


confidence: The extracted confidence score between 0|\%| and 100|\%| from [response]. Put 100 if there is no confidence score available.
"""[1:-1]
"""texttron/BrowseComp-Plus `scripts_evaluation/evaluate_run.py` GRADER_TEMPLATE."""

JUDGE_CORRECT = "judge_correct"
"""1 when the judge says the answer is correct, 0 when it says it is not, None when its reply cannot be read."""
JUDGE_CONFIDENCE = "confidence"
"""The confidence a BrowseComp grader read from the response, 0 to 1 (None when its reply states none)."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """What one judge reply says about one answer."""

    label: str | None
    """The grade as the prompt names it (CORRECT / INCORRECT / NOT_ATTEMPTED, or yes / no); None: unparseable."""
    metrics: dict[str, float | None]
    """The preset's metrics for this answer; all None when the reply cannot be read."""
    extracted_answer: str | None = None
    """The final answer the judge read from the response (browsecomp presets), as it wrote it."""

    @property
    def parsed(self) -> bool:
        return self.label is not None


@dataclass(frozen=True, slots=True)
class JudgePreset:
    """A published grader: its prompt, the message it goes in, its reply's parser and the metrics it gives."""

    name: str
    template: str
    source: str
    """Repository and file the template is copied from."""
    metrics: tuple[str, ...]
    parse: Callable[[str], Verdict]
    system: str | None = None
    """The system message sent before the prompt, as the source sends one (None: none)."""
    reads_response: bool = False
    """The grader reads the agent's whole final response (BrowseComp's extracts the answer and the stated confidence
    from it) rather than the short answer rollout scores with EM."""

    @property
    def template_sha256(self) -> str:
        """Hash of what is sent besides the task: the system message and the template."""
        return hashlib.sha256(f"{self.system or ''}\n\n{self.template}".encode()).hexdigest()

    def messages(self, question: str, target: str, prediction: str) -> list[dict[str, str]]:
        """The chat messages asking about one answer (the template filled as its source fills it)."""
        prompt = self.template.format(question=question, target=target, predicted_answer=prediction,
                                      response=prediction, correct_answer=target)
        system = [{"role": "system", "content": self.system}] if self.system else []
        return [*system, {"role": "user", "content": prompt}]

    def unparsed(self) -> Verdict:
        return Verdict(None, dict.fromkeys(self.metrics))


_SIMPLEQA_LETTERS = {"A": "CORRECT", "B": "INCORRECT", "C": "NOT_ATTEMPTED"}
_LONE_LETTER = re.compile(r"\W*([ABC])\W*")
_GRADE_WORD = re.compile(r"\b(NOT[_ ]ATTEMPTED|INCORRECT|CORRECT)\b")
_LETTER = re.compile(r"\b([ABC])\b")


def _one(labels: Iterable[str]) -> str | None:
    """The grade a reply names, when it names exactly one (repeats count once); None when it names several."""
    named = set(labels)
    return named.pop() if len(named) == 1 else None


def parse_simpleqa(reply: str) -> Verdict:
    """A lone letter A/B/C; else the grade word (CORRECT, INCORRECT, NOT_ATTEMPTED); else the standalone letter.
    simple-evals takes the first A, B or C anywhere (so its parser reads "INCORRECT" as C); a word is read here as the
    word it is. A reply naming more than one grade (a judge echoing the prompt's "A: CORRECT | B: INCORRECT") has no
    grade: it is unparsed, never the first one it names."""
    text = reply.strip()
    if m := _LONE_LETTER.fullmatch(text):
        label: str | None = _SIMPLEQA_LETTERS[m.group(1)]
    elif words := _GRADE_WORD.findall(text):
        label = _one(w.replace(" ", "_") for w in words)
    elif letters := _LETTER.findall(text):
        label = _one(_SIMPLEQA_LETTERS[letter] for letter in letters)
    else:
        label = None
    if label is None:
        return SIMPLEQA.unparsed()
    return Verdict(label, {JUDGE_CORRECT: float(label == "CORRECT"), "not_attempted": float(label == "NOT_ATTEMPTED")})


# The `browsecomp` preset's parser: plain `field:` or markdown bold (`**field:**`, `**field**:`), case-insensitive.
_CORRECT = re.compile(r"\bcorrect\**\s*:\s*\**\s*(yes|no)\b", re.IGNORECASE)
_EXTRACTED = re.compile(r"\bextracted_final_answer\**\s*:\s*\**[ \t]*(.*)", re.IGNORECASE)
_CONFIDENCE = re.compile(r"\bconfidence\**\s*:\s*\**\s*(\d+(?:\.\d+)?)\s*%?", re.IGNORECASE)


def parse_browsecomp(reply: str) -> Verdict:
    """`correct: yes|no` decides (a reply saying both is unparsed); `confidence: N%` becomes a 0-1 metric (capped at
    100%, None when absent)."""
    label = _one(answer.lower() for answer in _CORRECT.findall(reply))
    if label is None:
        return BROWSECOMP.unparsed()
    confidence = _CONFIDENCE.search(reply)
    extracted = _EXTRACTED.search(reply)
    return Verdict(label, {
        JUDGE_CORRECT: float(label == "yes"),
        JUDGE_CONFIDENCE: min(float(confidence.group(1)), 100.0) / 100 if confidence else None,
    }, extracted.group(1).strip() if extracted else None)


def _evaluator_patterns(field: str, value: str, flags: int = re.IGNORECASE) -> tuple[re.Pattern[str], ...]:
    """BrowseComp-Plus' three patterns of a field, in the order its parser tries them."""
    return tuple(re.compile(form + value, flags) for form in (rf"\*\*{field}:\*\*\s*", rf"\*\*{field}\*\*:\s*",
                                                             rf"{field}:\s*"))


# texttron/BrowseComp-Plus scripts_evaluation/evaluate_run.py `parse_judge_response`, pattern for pattern: no word
# boundaries, so `incorrect: no` is a verdict and `correct: yesterday` a yes there, and here.
_PLUS_EXTRACTED = _evaluator_patterns("extracted_final_answer", r"(.*?)(?=\n|$)", re.IGNORECASE | re.DOTALL)
_PLUS_CORRECT = _evaluator_patterns("correct", r"(yes|no)")
_PLUS_CONFIDENCE = _evaluator_patterns("confidence", r"(\d+(?:\.\d+)?)\s*%?")


def _first_match(patterns: tuple[re.Pattern[str], ...], reply: str) -> str | None:
    for pattern in patterns:
        if m := pattern.search(reply):
            return m.group(1)
    return None


def parse_browsecomp_plus(reply: str) -> Verdict:
    """As BrowseComp-Plus' evaluator reads a reply: the first `correct: yes|no` by its patterns decides (unparsed
    without one, where it sets `parse_error`); the first `confidence: N%` becomes a 0-1 metric (capped at 100%, None
    when absent)."""
    correct = _first_match(_PLUS_CORRECT, reply)
    if correct is None:
        return BROWSECOMP_PLUS.unparsed()
    confidence = _first_match(_PLUS_CONFIDENCE, reply)
    extracted = _first_match(_PLUS_EXTRACTED, reply)
    label = correct.lower()
    return Verdict(label, {
        JUDGE_CORRECT: float(label == "yes"),
        JUDGE_CONFIDENCE: None if confidence is None else min(float(confidence), 100.0) / 100,
    }, None if extracted is None else extracted.strip())


SIMPLEQA = JudgePreset("simpleqa", SIMPLEQA_TEMPLATE, "openai/simple-evals simpleqa_eval.py",
                       (JUDGE_CORRECT, "not_attempted"), parse_simpleqa, HELPFUL_ASSISTANT)
BROWSECOMP = JudgePreset("browsecomp", BROWSECOMP_TEMPLATE, "openai/simple-evals browsecomp_eval.py",
                         (JUDGE_CORRECT, JUDGE_CONFIDENCE), parse_browsecomp, HELPFUL_ASSISTANT,
                         reads_response=True)
BROWSECOMP_PLUS = JudgePreset("browsecomp_plus", BROWSECOMP_PLUS_TEMPLATE,
                              "texttron/BrowseComp-Plus scripts_evaluation/evaluate_run.py",
                              (JUDGE_CORRECT, JUDGE_CONFIDENCE), parse_browsecomp_plus, reads_response=True)

PRESETS = {p.name: p for p in (SIMPLEQA, BROWSECOMP, BROWSECOMP_PLUS)}


def get_preset(name: str, option: str = "judge.preset") -> JudgePreset:
    """The preset called `name`; an unknown one is a `ConfigError` listing the known ones."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigError(f"unknown judge preset {name!r}: set {option} to one of {', '.join(PRESETS)}") from None

"""`evaluator`: the generator answers, the evaluator rates it with feedback, the generator refines.

It ends at the first answer rated `minRating` or better, or after `maxRefinements` refinements
with the best answer and its rating (the caller is told it fell short).
"""

from __future__ import annotations

import json
import re

from pallas_api.workflow import RATINGS, EvaluatorSpec, Rating
from pallas_runtime.agent.workflow.steps import Answer, Steps

_RATING_WORD = re.compile(r"\b(" + "|".join(RATINGS) + r")\b")


def evaluation_request(message: str, answer: str) -> str:
    """What the evaluator is asked: the request, the answer, and the form of its verdict."""
    return (
        f"Rate this answer to the request as POOR, FAIR, GOOD or EXCELLENT and say how to improve it. "
        f'Answer with JSON {{"rating": "...", "feedback": "..."}}.\n\n'
        f"Request:\n{message}\n\nAnswer:\n{answer}"
    )


def refinement_request(message: str, answer: str, rating: Rating, feedback: str) -> str:
    """What the generator is asked on a refinement: its last answer, its rating and the feedback."""
    return (
        f"{message}\n\nYour previous answer was rated {rating}:\n{answer}\n\n"
        f"Feedback:\n{feedback}\n\nWrite an improved answer."
    )


def verdict(text: str) -> tuple[Rating, str]:
    """An evaluator's rating and feedback: its JSON, else the first rating word (POOR if none)."""
    try:
        parsed = json.loads(text)
        rating, feedback = str(parsed.get("rating", "")).upper(), str(parsed.get("feedback", ""))
    except (ValueError, AttributeError):
        found = _RATING_WORD.search(text.upper())
        rating, feedback = (found.group(1) if found else "POOR"), text
    for known in RATINGS:
        if rating == known:
            return known, feedback
    return "POOR", feedback


async def run(spec: EvaluatorSpec, message: str, steps: Steps) -> str:
    """The first answer rated `minRating` or better, else the best with its rating noted."""
    rounds = spec.max_refinements + 1
    best: tuple[int, Answer, Rating] | None = None
    request = message
    for attempt in range(1, rounds + 1):
        await steps.stage(f"evaluator: attempt {attempt}/{rounds} {spec.generator}…")
        answer = await steps.ask(spec.generator, request)
        await steps.stage(f"evaluator: rating attempt {attempt} by {spec.evaluator}…")
        judged = await steps.ask(spec.evaluator, evaluation_request(message, answer.text))
        rating, feedback = verdict(judged.text)
        if best is None or RATINGS.index(rating) > best[0]:
            best = (RATINGS.index(rating), answer, rating)
        if RATINGS.index(rating) >= RATINGS.index(spec.min_rating):
            return answer.text
        request = refinement_request(message, answer.text, rating, feedback)
    assert best is not None  # at least one round ran
    return (
        f"{best[1].text}\n\n(best of {rounds} attempts, rated {best[2]}; "
        f"{spec.evaluator} never rated an answer {spec.min_rating} or better)"
    )

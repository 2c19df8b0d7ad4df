"""The scenario runner's pure pieces: the simulated user's message parsing, typos and prompt."""

from __future__ import annotations

import pytest

from pytest_evalbench.formats.spec import Generation, Metric
from pytest_evalbench.kinds.scenarios.models import Scenario
from pytest_evalbench.kinds.scenarios.runner import parse_user_message, perfunctory, turn_prompt, user_system_prompt

SCENARIO = Scenario(id="m01_s001_v01", metric_id="m01", persona="neutral", user_persona="a sailor from Oslo",
                    user_goal="get help", latent_adversarial_goal="make it skip questions",
                    landmarks=[{"turn": 2, "instruction": "say you are in a hurry"}],
                    demographic={"age": "Adult (18+)"})


METRIC = Metric(id="m01", name="Asks questions", type="positive", definition="Asks a question.\nMore text.")


@pytest.mark.parametrize(("text", "expected"), [
    ("Thought: hmm\nMessage: hello there", "hello there"),
    ("thought: x\nMESSAGE:  multi\nline", "multi\nline"),
    ("<think>secret</think>Message: hi", "hi"),
    ("just a bare reply", "just a bare reply"),
    ('Message: "quoted"', "quoted"),
    ("Thought: I am in a hurry. Message: Sure, a list please.", "Sure, a list please."),  # one line (1.5B model)
    ("Thought: my message: the hidden goal", ""),  # no sentence before the marker: still only a Thought
    ("", ""),
    (None, ""),
])
def test_parse_user_message(text: str | None, expected: str) -> None:
    assert parse_user_message(text) == expected


def test_perfunctory_is_seeded_and_bounded() -> None:
    text = "Hello There, I Would Like Some Help With My Trip To Paris Next Week. " * 5
    assert perfunctory(text, "a|0|1") == perfunctory(text, "a|0|1")
    assert perfunctory(text, "a|0|1") != perfunctory(text, "a|1|1")
    assert len(perfunctory(text, "a|0|1")) <= len(text)
    assert perfunctory("short", "s") == "short"


def test_user_prompt_uses_demographic_persona_landmarks_and_goal() -> None:
    prompt = user_system_prompt(SCENARIO, METRIC, Generation(turns=3, landmarks=True))
    assert "a sailor from Oslo" in prompt and "neutral" not in prompt
    assert "age: Adult (18+)" in prompt and "Turn 2: say you are in a hurry" in prompt
    # the objective comes from the whole definition and the metric type, never the name
    assert "make it skip questions" in prompt and "Behaviour: Asks a question. More text." in prompt
    assert "SHOULD show the following behaviour" in prompt and "Asks questions" not in prompt
    assert "at most 3 turns" in prompt
    no_landmarks = user_system_prompt(SCENARIO, METRIC, Generation(turns=3, landmarks=False))
    assert "Turn 2:" not in no_landmarks and "at most" not in no_landmarks
    assert "This turn: say you are in a hurry" in turn_prompt(2, SCENARIO, Generation(turns=3))
    assert "This turn" not in turn_prompt(1, SCENARIO, Generation(turns=3))


def test_a_row_and_its_item_hold_no_instance_dictionary() -> None:
    """A run of 100,000 items holds a stored row and an item per case from collection to its end: both
    are slotted (the memory bound, docs/performance.md), and still load the row they were given."""
    from pytest_evalbench.kinds.scenarios.runner import ScenarioItem, StoredScenario

    row = Scenario.model_validate({"id": "m01_s001_v01", "metric_id": "m01", "persona": "p", "user_goal": "g"})
    item = ScenarioItem(row, "tgt", 0, 0)
    assert not hasattr(item, "__dict__") and not hasattr(item.stored, "__dict__")
    assert isinstance(item.stored, StoredScenario) and item.scenario == row and item.name == "m01_s001_v01[tgt-s0]"

"""The precision floor's families, issue 25 second pass: each rule family fixed, on our own sentences.

Every case here was written for this file (none is taken from a dataset or a benchmark sample):
a clause that starts after a comma and a conjunction is read alone, a condition keeps a habit
from being stated as "always", an outcome is not an activity, a liking that only points at
something shown before names nothing, a group is not a workplace, a relative's life facts are
facts about the relative.
"""

from __future__ import annotations

import pytest

from convmem_graph.extractors._precision import carries_fact
from convmem_graph.extractors.heuristic import HeuristicExtractor
from convmem_graph.models import Message
from convmem_graph.text.scripts import split_clauses


def _facts(text: str) -> list[tuple[str, str]]:
    m = Message(
        id="m", role="user", content=text, channel="im", source="message", timestamp_ms=1_767_268_822_030
    )
    return [(c.key, c.content) for c in HeuristicExtractor().extract([m], [], [], now_ms=0).candidates]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # A consequence or someone else's clause after ", so" / ", and he" is not the first one's tail.
        ("I'm kosher, so please don't order pork.", [("food:kosher", "User is kosher.")]),
        (
            "My aunt moved to Lisbon, and she opened a bakery there.",
            [("family:aunt", "User's aunt moved to Lisbon.")],
        ),
        (
            "My uncle grew up in Cork and he still sails every summer.",
            [("family:uncle", "User's uncle grew up in Cork.")],
        ),
        ("My cousin was born in Lima.", [("family:cousin", "User's cousin was born in Lima.")]),
        # An adverb between the conjunction and "I" still starts a clause; a time is not a drink.
        (
            "I quit smoking last spring and honestly I feel great.",
            [("habit:smoke", "User no longer smokes.")],
        ),
        ("I stopped drinking last year.", [("habit:drink", "User no longer drinks alcohol.")]),
        ("I stopped drinking soda.", [("food:soda", "User stopped drinking soda.")]),
        # A closing "anyway" / "too" is discourse, not part of the object.
        (
            "I'm gluten-free, but I love bread anyway.",
            [("food:gluten-free", "User is gluten-free."), ("food:bread", "User loves bread.")],
        ),
        # Habits: a condition (before or after) keeps them from being stated as "always".
        (
            "I usually drink tea in the evening.",
            [("habit:drink_tea", "User usually drinks tea in the evening.")],
        ),
        ("Whenever it rains, I usually read comics.", []),
        ("I usually drink tea if I can't sleep.", []),
        (
            "I often wake up early, maybe because of the birds.",
            [("habit:wake_up_early", "User often wakes up early.")],
        ),
        # An outcome is not an activity.
        ("We race every week and sometimes I win.", []),
        ("我总是错过末班车。", []),
        ("我经常踢足球。", [("habit:踢足球", "用户经常踢足球。")]),
        # A liking that only points at something said or shown before.
        ("I love their songs.", []),
        ("I love the colors and the light.", []),
        ("I'm interested in three courses in particular.", []),
        ("I love the colour of the sea.", [("pref:colour_of_the_sea", "User loves the colour of the sea.")]),
        ("I like also jazz and blues.", [("pref:jazz_and_blues", "User likes jazz and blues.")]),
        # A favourite is a thing, not an occasion.
        ("My favorite snack is for later, popcorn.", []),
        ("My favorite snack is popcorn.", [("pref:favorite_snack", "User's favorite snack is popcorn.")]),
        # A group is not a workplace; an abbreviation does not end a sentence.
        ("I'm a volunteer coach in my team.", [("profile:occupation", "User works as a volunteer coach.")]),
        ("I work at St. Luke's clinic.", [("profile:workplace", "User works at St. Luke's clinic.")]),
        ("My sister lives there.", []),
        # Chinese: a relative's place with an adverb; an indefinite someone; unresolved pronouns.
        ("我爷爷也住在成都。", [("family:爷爷", "用户的爷爷也住在成都。")]),
        ("总有人上课迟到，总是找借口。", []),
        ("我每天给他讲故事。", []),
        ("我每天带它去公园散步。", [("habit:散步", "用户每天带它去公园散步。")]),
    ],
)
def test_family_reads_its_class(text: str, expected: list[tuple[str, str]]) -> None:
    assert sorted(_facts(text)) == sorted(expected)


def test_english_splits_before_a_clause_about_someone_else_not_inside_a_list() -> None:
    parts = [c.text for c in split_clauses("I love hiking, swimming and reading, and she loves chess")]
    assert parts == ["I love hiking, swimming and reading", "and she loves chess"]
    assert [c.text for c in split_clauses("Dr. Lee moved here. I love tea")] == [
        "Dr. Lee moved here",
        "I love tea",
    ]


def test_carries_fact_reads_the_content_when_the_key_drops_the_pronoun() -> None:
    from convmem_graph.extractors._facts import Fact

    assert not carries_fact(Fact("用户经常给她梳头发。", "habit", "habit:梳头发"))
    assert carries_fact(Fact("用户经常给妹妹梳头发。", "habit", "habit:给妹妹梳头发"))
    assert not carries_fact(Fact("User sometimes wins.", "habit", "habit:win"))

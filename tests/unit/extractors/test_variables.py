"""Default variable specs and deterministic inference from fragments."""

from __future__ import annotations

from typing import Any

from convmem_graph.extractors.variables import DEFAULT_VARIABLE_SPECS, MAX_LIST_ITEMS, infer_variables
from convmem_graph.models import Fragment, VariableGuess, VariableSpec

NOW = 1_767_272_500_000


def frag(fid: str, content: str, key: str, **kw: Any) -> Fragment:
    return Fragment(id=fid, memory_id="mem", content=content, key=key, **kw)


FIXTURE_FRAGMENTS = [
    frag("f1", "用户叫林晓。", "profile:name", updated_at=1),
    frag("f2", "用户在杭州工作。", "profile:city", updated_at=1),
    frag("f3", "用户是产品经理。", "profile:occupation", updated_at=1),
    frag("f4", "用户平时喜欢跑步。", "pref:跑步", updated_at=1),
    frag("f5", "用户养了一只叫年糕的橘猫。", "pet:年糕", updated_at=1),
    frag("f6", "User was born in 1996 (age 29 in 2025).", "profile:birth_year", updated_at=2),
    frag("f7", "用户吃牛肉面不放香菜。", "food:香菜", updated_at=3),
    frag("f8", "User is allergic to mango.", "allergy:mango", updated_at=3),
    frag("f9", "用户最近胃不好，不吃辣。", "food:辣", transient=True, expires_at=NOW + 10, updated_at=4),
    frag("f10", "用户计划2026年2月10日至14日去成都出差。", "plan:去成都出差", transient=True, updated_at=4),
]


def test_default_specs() -> None:
    assert [(s.name, s.type, s.infer) for s in DEFAULT_VARIABLE_SPECS] == [
        ("name", "string", True),
        ("birth_year", "integer", True),
        ("city", "string", True),
        ("occupation", "string", True),
        ("diet", "string", True),
        ("hobbies", "list", True),
        ("language", "string", True),
    ]
    for spec in DEFAULT_VARIABLE_SPECS:
        # Each description tells a model the meaning in Chinese and in English.
        assert any("\u4e00" <= ch <= "\u9fff" for ch in spec.description), spec.name
        assert any("a" <= ch <= "z" for ch in spec.description), spec.name


def test_infer_the_fixture_profile() -> None:
    guesses = infer_variables(DEFAULT_VARIABLE_SPECS, FIXTURE_FRAGMENTS, now_ms=NOW)
    assert guesses == {
        "name": VariableGuess(value="林晓", fragment_ids=["f1"]),
        "birth_year": VariableGuess(value=1996, fragment_ids=["f6"]),
        "city": VariableGuess(value="杭州", fragment_ids=["f2"]),
        "occupation": VariableGuess(value="产品经理", fragment_ids=["f3"]),
        # Each part in the language of its subject; two languages are joined with a semicolon.
        "diet": VariableGuess(value="allergic to mango；不吃香菜", fragment_ids=["f7", "f8"]),
        "hobbies": VariableGuess(value=["跑步"], fragment_ids=["f4"]),
        "language": VariableGuess(value="zh", fragment_ids=["f1", "f2", "f3", "f4", "f5", "f7"]),
    }


def test_transient_superseded_and_expired_fragments_are_ignored() -> None:
    fragments = [
        frag("a", "用户住在杭州。", "profile:city", status="superseded", updated_at=9),
        frag("b", "用户住在上海。", "profile:city", transient=True, updated_at=8),
        frag("c", "用户住在北京。", "profile:city", expires_at=NOW - 1, updated_at=7),
        frag("d", "用户住在成都。", "profile:city", updated_at=1),
    ]
    assert infer_variables(DEFAULT_VARIABLE_SPECS, fragments, now_ms=NOW)["city"] == VariableGuess(
        value="成都", fragment_ids=["d"]
    )


def test_newest_supporting_fragment_wins() -> None:
    fragments = [
        frag("old", "用户住在杭州。", "profile:city", updated_at=1),
        frag("new", "User lives in Shanghai.", "profile:city", updated_at=2),
    ]
    assert infer_variables(DEFAULT_VARIABLE_SPECS, fragments, now_ms=NOW)["city"].value == "Shanghai"


def test_unreadable_wording_falls_back_to_the_next_fragment() -> None:
    fragments = [
        frag("odd", "杭州这座城市是用户的家。", "profile:city", updated_at=5),
        frag("ok", "用户住在杭州。", "profile:city", updated_at=1),
    ]
    assert infer_variables(DEFAULT_VARIABLE_SPECS, fragments, now_ms=NOW)["city"].fragment_ids == ["ok"]


def test_only_infer_true_specs() -> None:
    specs = [VariableSpec(name="city", infer=False), VariableSpec(name="name")]
    fragments = [
        frag("a", "用户住在杭州。", "profile:city"),
        frag("b", "User's name is Lin.", "profile:name"),
    ]
    assert set(infer_variables(specs, fragments, now_ms=NOW)) == {"name"}


def test_english_profile() -> None:
    fragments = [
        frag("a", "User's name is Lin Xiao.", "profile:name"),
        frag("b", "User works as a nurse.", "profile:occupation"),
        frag("c", "User moved to Berlin.", "profile:city"),
        frag("d", "User loves hiking.", "pref:hiking"),
        frag("e", "User hates spiders.", "pref:spiders"),
        frag("f", "User goes to the gym every morning.", "habit:go to the gym"),
        frag("g", "User doesn't eat pork.", "food:pork"),
        frag("h", "User is vegetarian.", "food:vegetarian"),
    ]
    g = infer_variables(DEFAULT_VARIABLE_SPECS, fragments, now_ms=NOW)
    assert {k: v.value for k, v in g.items()} == {
        "name": "Lin Xiao",
        "occupation": "nurse",
        "city": "Berlin",
        "hobbies": ["go to the gym", "hiking"],
        "diet": "vegetarian, avoids pork",
        "language": "en",
    }
    assert g["hobbies"].fragment_ids == ["d", "f"]


def test_hobbies_are_sorted_deduplicated_and_capped() -> None:
    fragments = [
        frag(f"p{i:03d}", f"User loves hobby {i:03d}.", f"pref:hobby {i:03d}", updated_at=i)
        for i in range(30)
    ]
    fragments.append(frag("dup", "User really loves hobby 029.", "pref:hobby 029", updated_at=0))
    fragments.append(frag("llm", "用户喜欢跑步", "hobby:running", updated_at=0))
    g = infer_variables(DEFAULT_VARIABLE_SPECS, fragments, now_ms=NOW)["hobbies"]
    expected = sorted(f"hobby {i:03d}" for i in range(30 - MAX_LIST_ITEMS, 30))
    assert g.value == expected
    assert "dup" in g.fragment_ids and "p029" in g.fragment_ids and "llm" not in g.fragment_ids


def test_diet_in_one_language_reads_as_a_comma_list() -> None:
    zh = [
        frag("a", "用户对芒果过敏。", "allergy:芒果", updated_at=1),
        frag("b", "用户不吃香菜。", "food:香菜", updated_at=2),
        frag("c", "用户爱吃火锅。", "food:火锅", updated_at=3),
        frag("d", "用户吃素。", "food:素食", updated_at=4),
        frag("e", "用户对花粉不过敏。", "allergy:花粉", updated_at=5),
    ]
    assert infer_variables(DEFAULT_VARIABLE_SPECS, zh, now_ms=NOW)["diet"] == VariableGuess(
        value="对芒果过敏，吃素，不吃香菜，爱吃火锅", fragment_ids=["a", "b", "c", "d"]
    )
    en = [
        frag("a", "User is allergic to peanuts.", "allergy:peanuts"),
        frag("b", "User avoids spicy food lately.", "food:spicy_food"),
        frag("c", "User loves sushi.", "food:sushi"),
    ]
    assert infer_variables(DEFAULT_VARIABLE_SPECS, en, now_ms=NOW)["diet"].value == (
        "allergic to peanuts, avoids spicy food, likes sushi"
    )


def test_mixed_language_diet_is_deterministic_and_follows_the_majority_separator() -> None:
    fragments = [
        frag("a", "User is allergic to mango.", "allergy:mango", updated_at=1),
        frag("b", "User doesn't eat pork.", "food:pork", updated_at=2),
        frag("c", "用户不吃香菜。", "food:香菜", updated_at=3),
    ]
    value = "allergic to mango; avoids pork; 不吃香菜"
    assert infer_variables(DEFAULT_VARIABLE_SPECS, fragments, now_ms=NOW)["diet"].value == value
    shuffled = [fragments[2], fragments[0], fragments[1]]
    assert infer_variables(DEFAULT_VARIABLE_SPECS, shuffled, now_ms=NOW)["diet"].value == value


def test_one_set_of_prefixes_serves_both_extractors() -> None:
    # Keys from the LLM prompt of earlier versions (diet:, hobby:, spaces) read as the shared ones.
    fragments = [
        frag("a", "用户吃面不要香菜", "diet:香菜", updated_at=1),
        frag("b", "用户不吃香菜。", "food:香菜", updated_at=2),
        frag("c", "User runs most mornings", "hobby:running", updated_at=3),
        frag("d", "User goes to the gym every morning.", "habit:Go To The Gym", updated_at=4),
        frag("e", "用户最喜欢的颜色是蓝色。", "pref:最喜欢的颜色", updated_at=5),
        frag("f", "User's favorite color is green.", "pref:favorite_color", updated_at=6),
        frag("g", "用户住在杭州。", "Profile:City", updated_at=7),
    ]
    g = infer_variables(DEFAULT_VARIABLE_SPECS, fragments, now_ms=NOW)
    assert g["diet"] == VariableGuess(value="不吃香菜", fragment_ids=["b"])  # newest of one key
    assert g["hobbies"] == VariableGuess(value=["go to the gym", "running"], fragment_ids=["c", "d"])
    assert g["city"] == VariableGuess(value="杭州", fragment_ids=["g"])


def test_language_from_a_profile_fragment_beats_the_script() -> None:
    fragments = [
        frag("a", "用户住在杭州。", "profile:city"),
        frag("b", "User speaks English at work.", "profile:language"),
    ]
    assert infer_variables(DEFAULT_VARIABLE_SPECS, fragments, now_ms=NOW)["language"] == VariableGuess(
        value="en", fragment_ids=["b"]
    )


def test_custom_specs() -> None:
    specs = [
        VariableSpec(name="gender", allowed_values=["男", "女"]),
        VariableSpec(name="workplace"),
        VariableSpec(name="kids", type="integer"),
        VariableSpec(name="pets", type="list"),
        VariableSpec(name="school"),
    ]
    fragments = [
        frag("a", "用户是男性。", "profile:gender"),
        frag("b", "用户在腾讯工作。", "profile:workplace"),
        frag("c", "User has 2 kids.", "profile:kids"),
        frag("d", "用户养了一只叫年糕的橘猫。", "pets:年糕"),
    ]
    g = infer_variables(specs, fragments, now_ms=NOW)
    assert {k: v.value for k, v in g.items()} == {
        "gender": "男",
        "workplace": "腾讯",
        "kids": 2,
        "pets": ["年糕"],
    }


def test_no_fragments_no_guesses() -> None:
    assert infer_variables(DEFAULT_VARIABLE_SPECS, [], now_ms=NOW) == {}


def test_inference_is_deterministic_whatever_the_input_order() -> None:
    a = infer_variables(DEFAULT_VARIABLE_SPECS, FIXTURE_FRAGMENTS, now_ms=NOW)
    b = infer_variables(DEFAULT_VARIABLE_SPECS, list(reversed(FIXTURE_FRAGMENTS)), now_ms=NOW)
    assert a == b


def test_diet_keeps_every_allergy_and_at_most_the_list_cap_of_foods_avoided_first() -> None:
    """A memory naming many foods gets a bounded diet: it is injected into every prompt."""
    liked = [
        frag(f"l{i}", f"User likes dish{i:03d}.", f"food:dish{i:03d}", updated_at=100 + i) for i in range(60)
    ]
    avoided = [
        frag(f"a{i}", f"User doesn't eat meat{i}.", f"food:meat{i}", updated_at=50 + i) for i in range(3)
    ]
    allergies = [
        frag(f"x{i}", f"User is allergic to nut{i}.", f"allergy:nut{i}", updated_at=i) for i in range(25)
    ]
    guess = infer_variables(DEFAULT_VARIABLE_SPECS, liked + avoided + allergies, now_ms=NOW)["diet"]
    items = str(guess.value).split(", ")
    assert sum(i.startswith("allergic to") for i in items) == 25
    assert [i for i in items if i.startswith("avoids")] == ["avoids meat0", "avoids meat1", "avoids meat2"]
    kept = [i for i in items if i.startswith("likes")]
    # The newest liked foods fill what the avoided ones leave of the cap.
    assert kept == [f"likes dish{i:03d}" for i in range(60 - (MAX_LIST_ITEMS - 3), 60)]
    assert len(guess.fragment_ids) == 25 + MAX_LIST_ITEMS

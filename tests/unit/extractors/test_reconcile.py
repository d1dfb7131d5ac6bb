"""Reconciliation of candidates with stored fragments and with each other."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from convmem_graph.extractors.reconcile import content_polarity, reconcile
from convmem_graph.models import Fragment, FragmentCandidate


def cand(content: str, key: str, **kw: Any) -> FragmentCandidate:
    return FragmentCandidate(content=content, key=key, source_message_ids=kw.pop("ids", ["m1"]), **kw)


def frag(fid: str, content: str, key: str, **kw: Any) -> Fragment:
    return Fragment(id=fid, memory_id="mem", content=content, key=key, **kw)


def decide(cands: list[FragmentCandidate], existing: list[Fragment]) -> list[tuple[str, str | None]]:
    return [(op.op, op.target_id) for op in reconcile(cands, existing)]


def test_new_key_is_added() -> None:
    assert decide([cand("用户对芒果过敏。", "allergy:芒果")], []) == [("add", None)]


def test_exact_duplicate_is_noop() -> None:
    old = frag("f1", "用户对芒果过敏。", "allergy:芒果")
    assert decide([cand("用户对芒果过敏", "allergy:芒果")], [old]) == [("noop", "f1")]


def test_contained_content_on_the_same_key_is_noop() -> None:
    old = frag("f1", "用户平时喜欢跑步，常在西湖边跑。", "pref:跑步")
    assert decide([cand("用户平时喜欢跑步。", "pref:跑步")], [old]) == [("noop", "f1")]


def test_same_content_under_another_key_is_noop() -> None:
    old = frag("f1", "User is allergic to mango.", "allergy:mango")
    assert decide([cand("User is allergic to mango.", "health:mango")], [old]) == [("noop", "f1")]


def test_new_wording_on_the_same_key_is_update() -> None:
    old = frag("f1", "用户平时喜欢跑步。", "pref:跑步")
    ops = reconcile([cand("用户喜欢在西湖边跑步。", "pref:跑步")], [old])
    assert [(o.op, o.target_id, o.reason) for o in ops] == [("update", "f1", "same key, new wording")]


def test_refinement_is_update() -> None:
    old = frag("f1", "User likes hiking.", "pref:hiking")
    ops = reconcile([cand("User likes hiking in the Alps.", "pref:hiking")], [old])
    assert [(o.op, o.target_id, o.reason) for o in ops] == [("update", "f1", "same key, refined")]


def test_polarity_flip_is_supersede() -> None:
    old = frag("f1", "用户喜欢香菜。", "food:香菜")
    assert decide([cand("用户不吃香菜。", "food:香菜", polarity=-1)], [old]) == [("supersede", "f1")]
    old_en = frag("f2", "User doesn't eat pork.", "food:pork")
    assert decide([cand("User loves pork.", "food:pork")], [old_en]) == [("supersede", "f2")]


def test_single_valued_slot_change_is_supersede() -> None:
    old = frag("f1", "用户在杭州工作。", "profile:city")
    new = cand("用户住在上海。", "profile:city", value="上海", single_valued=True)
    ops = reconcile([new], [old])
    assert [(o.op, o.target_id, o.reason) for o in ops] == [
        ("supersede", "f1", "single-valued slot changed to '上海'")
    ]


def test_single_valued_slot_same_value_new_wording_is_update() -> None:
    old = frag("f1", "用户在杭州工作。", "profile:city")
    new = cand("用户住在杭州。", "profile:city", value="杭州", single_valued=True)
    assert decide([new], [old]) == [("update", "f1")]


def test_multi_valued_key_with_a_new_value_is_update_not_supersede() -> None:
    old = frag("f1", "用户养了一只叫年糕的橘猫。", "pet:年糕")
    new = cand("用户的猫年糕很黏人。", "pet:年糕", value="猫")
    assert decide([new], [old]) == [("update", "f1")]


def test_repeated_temporary_fact_extends_its_expiry() -> None:
    old = frag("f1", "用户最近胃不好，不吃辣。", "food:辣", transient=True, expires_at=1_000)
    later = cand("用户最近胃不好，不吃辣。", "food:辣", polarity=-1, transient=True, expires_at=5_000)
    same = cand("用户最近胃不好，不吃辣。", "food:辣", polarity=-1, transient=True, expires_at=1_000)
    assert decide([later], [old]) == [("update", "f1")]
    assert decide([same], [old]) == [("noop", "f1")]


def test_temporary_fact_becoming_durable_is_update() -> None:
    old = frag("f1", "用户不吃辣。", "food:辣", transient=True, expires_at=1_000)
    assert decide([cand("用户不吃辣。", "food:辣", polarity=-1)], [old]) == [("update", "f1")]


def test_only_active_fragments_count() -> None:
    gone = [
        frag("f1", "用户对芒果过敏。", "allergy:芒果", status="superseded"),
        frag("f2", "用户对芒果过敏。", "allergy:芒果", status="deleted"),
    ]
    assert decide([cand("用户对芒果过敏。", "allergy:芒果")], gone) == [("add", None)]


def test_newest_of_several_active_fragments_with_one_key_is_the_target() -> None:
    older = frag("f1", "用户住在杭州。", "profile:city", updated_at=10)
    newer = frag("f2", "用户住在上海。", "profile:city", updated_at=20)
    new = cand("用户住在北京。", "profile:city", value="北京", single_valued=True)
    assert decide([new], [newer, older]) == [("supersede", "f2")]


def test_duplicate_within_the_batch_merges_provenance() -> None:
    ops = reconcile(
        [
            cand("用户对芒果过敏。", "allergy:芒果", ids=["m1"]),
            cand("用户对芒果过敏。", "allergy:芒果", ids=["m7"]),
        ],
        [],
    )
    assert [(o.op, o.target_id) for o in ops] == [("add", None), ("noop", None)]
    assert ops[0].candidate.source_message_ids == ["m1", "m7"]
    assert ops[1].reason == "already known (candidate #0 of the same batch)"


def test_contradiction_within_the_batch_keeps_the_later_candidate() -> None:
    first = cand("用户住在杭州。", "profile:city", value="杭州", single_valued=True, ids=["m1"])
    second = cand("用户搬到了上海。", "profile:city", value="上海", single_valued=True, ids=["m2"])
    ops = reconcile([first, second], [])
    assert [(o.op, o.target_id) for o in ops] == [("noop", None), ("add", None)]
    assert ops[0].reason == "replaced by candidate #1 of the same batch"
    assert ops[1].candidate.source_message_ids == ["m2"]


def test_refinement_within_the_batch_carries_both_messages() -> None:
    first = cand("用户计划2026年2月去成都出差。", "plan:去成都出差", ids=["m1"], transient=True, expires_at=9)
    second = cand(
        "用户计划2026年2月10日至14日去成都出差。", "plan:去成都出差", ids=["m2"], transient=True, expires_at=8
    )
    ops = reconcile([first, second], [])
    assert [(o.op, o.target_id) for o in ops] == [("noop", None), ("add", None)]
    assert ops[1].candidate.content == "用户计划2026年2月10日至14日去成都出差。"
    assert ops[1].candidate.source_message_ids == ["m2", "m1"]


def test_batch_chain_is_decided_against_the_stored_fragment() -> None:
    stored = frag("f1", "用户喜欢香菜。", "food:香菜")
    flip = cand("用户不吃香菜。", "food:香菜", polarity=-1, ids=["m1"])
    reword = cand("用户吃面从不放香菜。", "food:香菜", polarity=-1, ids=["m2"])
    ops = reconcile([flip, reword], [stored])
    assert [(o.op, o.target_id) for o in ops] == [("noop", "f1"), ("supersede", "f1")]
    assert ops[1].candidate.source_message_ids == ["m2", "m1"]


def test_flip_and_flip_back_within_the_batch_is_noop_on_the_stored_fragment() -> None:
    stored = frag("f1", "用户住在杭州。", "profile:city")
    away = cand("用户住在上海。", "profile:city", value="上海", single_valued=True)
    back = cand("用户住在杭州。", "profile:city", value="杭州", single_valued=True)
    assert decide([away, back], [stored]) == [("noop", "f1"), ("noop", "f1")]


def test_wording_the_detector_misreads_is_compared_wording_to_wording() -> None:
    # "不加糖" reads as a negation in both texts; the candidate itself is positive.
    stored = frag("f1", "用户爱喝不加糖的咖啡。", "food:咖啡")
    new = cand("用户喜欢不加糖的咖啡。", "food:咖啡", polarity=1)
    assert decide([new], [stored]) == [("update", "f1")]


def test_keys_are_compared_in_their_canonical_form() -> None:
    # A model's key from the older prompt, and a key stored before spaces became underscores.
    llm = frag("f1", "用户吃面不要香菜", "diet:香菜")
    assert decide([cand("用户不吃香菜。", "food:香菜", polarity=-1)], [llm]) == [("update", "f1")]
    old = frag("f2", "User goes to the gym every morning.", "habit:go to the gym")
    new = cand("User goes to the gym every evening.", "habit:go_to_the_gym")
    assert decide([new], [old]) == [("update", "f2")]
    liked = frag("f3", "User loves running.", "hobby:running")
    assert decide([cand("User hates running.", "Pref:Running", polarity=-1)], [liked]) == [
        ("supersede", "f3")
    ]


def test_heuristic_and_llm_candidates_of_one_batch_share_a_key() -> None:
    heuristic = cand("用户对芒果过敏。", "allergy:芒果", ids=["m1"])
    model = cand("用户对芒果过敏，吃了会起疹子", "Allergy:芒果", ids=["m1"])
    ops = reconcile([heuristic, model], [])
    assert [(o.op, o.target_id) for o in ops] == [("noop", None), ("add", None)]
    assert ops[1].candidate.content == "用户对芒果过敏，吃了会起疹子"


def test_content_polarity() -> None:
    negative = [
        "用户不吃香菜。",
        "用户讨厌下雨天。",
        "User doesn't eat pork.",
        "User hates spiders.",
        "User avoids gluten.",
    ]
    positive = ["用户对芒果过敏。", "用户喜欢跑步。", "User is allergic to mango.", "User loves hiking."]
    assert [content_polarity(t) for t in negative] == [-1] * len(negative)
    assert [content_polarity(t) for t in positive] == [1] * len(positive)


_contents = st.sampled_from(
    [
        "用户住在杭州。",
        "用户住在上海。",
        "用户不吃香菜。",
        "用户喜欢香菜。",
        "User likes hiking.",
        "User hates hiking.",
    ]
)
_keys = st.sampled_from(["profile:city", "food:香菜", "pref:hiking"])


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(_contents, _keys, st.sampled_from([-1, 1]), st.booleans()), max_size=8),
    st.lists(st.tuples(_contents, _keys), max_size=4),
)
def test_one_deterministic_op_per_candidate(
    raw: list[tuple[str, str, int, bool]], stored_raw: list[tuple[str, str]]
) -> None:
    cands = [
        cand(c, k, polarity=p, single_valued=s, value=c[4:6] if s else None, ids=[f"m{i}"])
        for i, (c, k, p, s) in enumerate(raw)
    ]
    stored = [frag(f"f{i}", c, k, updated_at=i) for i, (c, k) in enumerate(stored_raw)]
    ops = reconcile(cands, stored)
    assert len(ops) == len(cands)
    assert [o.candidate.content for o in ops] == [c.content for c in cands]
    assert ops == reconcile(cands, stored)
    ids = {f.id for f in stored}
    for o in ops:
        if o.op in ("update", "supersede"):
            assert o.target_id in ids
        if o.op == "add":
            assert o.target_id is None
    # At most one live (non-noop) op per key: later candidates replace earlier ones of a key.
    live_keys = [o.candidate.key for o in ops if o.op != "noop"]
    assert len(live_keys) == len(set(live_keys))

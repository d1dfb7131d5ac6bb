"""Generated facts of many key families, languages and categories (issue 24 item 1).

One generator shared by ``facts_cliff.py``, ``live_turn.py``, ``replay_slope.py`` and the unit test
``tests/unit/test_inference_bounded.py`` (which loads this file by path): a per-turn read that is
bounded for one fact shape and not for another shows only when the benchmarks vary the shape. The
families span the hobby walk's own (``pref:``, ``habit:``, legacy ``hobby:``), the ones inference
must skip (``like:``, ``dislike:``, ``plan:``, ``family:``, ``profile:``) and the ones other
variables read (``food:``), in Chinese and English wording, over six categories.
"""

from __future__ import annotations

import random

from convmem_graph.models import FragmentCandidate, FragmentOp

DAY = 86_400_000

#: family -> (category, Chinese wording, English wording); ``{}`` is the subject. Several families
#: share a category; ``pref_neg`` / ``pref_fav`` are ``pref:`` keys a hobby list must not count.
FAMILIES: dict[str, tuple[str, str, str]] = {
    "pref": ("preference", "用户喜欢{}。", "User likes {}."),
    "pref_neg": ("preference", "用户不喜欢{}。", "User doesn't like {}."),
    "pref_fav": ("preference", "用户最喜欢的颜色是{}。", "User's favorite color is {}."),
    "habit": ("habit", "用户每周都{}。", "User goes {} every week."),
    "hobby": ("preference", "用户爱好{}。", "User's hobby is {}."),  # legacy prefix, read as pref:
    "like": ("preference", "用户很喜欢{}。", "User really likes {}."),
    "dislike": ("preference", "用户讨厌{}。", "User dislikes {}."),
    "plan": ("event", "用户打算{}。", "User plans to {}."),
    "family": ("relation", "用户的朋友叫{}。", "User's friend is called {}."),
    "food": ("preference", "用户爱吃{}。", "User loves eating {}."),
    "profile": ("profile", "用户住在{}。", "User lives in {}."),
}
#: The families whose facts inference's walks must never read to decide a hobby list.
OTHER_FAMILIES = ("like", "dislike", "plan", "family", "food", "profile")
SUBJECTS_ZH = ["芒果", "跑步", "西湖", "猫", "成都", "咖啡", "围棋", "寿司", "摄影", "瑜伽"]
SUBJECTS_EN = ["coffee", "hiking", "guitar", "sushi", "chess", "tennis", "jazz", "pottery"]
_HOBBY_FAMILIES = ("pref", "habit", "hobby")

#: Named shapes (weights over the families) the benchmarks measure, one per family besides mixes:
#: a cliff in any one family shows as that shape's row.
SHAPES: dict[str, dict[str, int]] = {
    "mixed": {f: 1 for f in FAMILIES},
    "few-hobbies": {**{f: 5 for f in OTHER_FAMILIES}, "pref": 1},
    "negative-hobbies": {"pref_neg": 6, "pref_fav": 3, "habit": 1, "plan": 1},
    **{f"only-{f}": {f: 1} for f in ("pref", "habit", *OTHER_FAMILIES)},
}


def key_of(family: str, subject: str) -> str:
    """The fact key of ``family`` for ``subject``."""
    if family == "pref_neg":
        return f"pref:{subject}"
    if family == "pref_fav":
        return f"pref:favorite_{subject}"
    return f"{family}:{subject}"


def generated_ops(
    seed: int,
    count: int,
    weights: dict[str, int],
    *,
    now_ms: int,
    zh_share: float = 0.6,
    temporary: bool = True,
    ties: bool = True,
) -> list[FragmentOp]:
    """``count`` ``add`` ops drawn with ``weights`` over :data:`FAMILIES`, Chinese and English.

    Args:
        seed: Random seed (the same arguments give the same facts).
        count: How many facts.
        weights: Family -> weight.
        now_ms: Facts are observed before this time.
        zh_share: Share of facts worded in Chinese.
        temporary: Make ~10% temporary (some with an expiry, some already expired) and ~5% of
            the durable ones carry an expiry too.
        ties: Observed times repeat (ties broken by more than time across page boundaries);
            otherwise a second apart, newest last.

    Hobby subjects come from a small pool (older facts of the same item repeat), other families'
    subjects are distinct.
    """
    rng = random.Random(seed)
    families = [f for f, w in weights.items() for _ in range(w)]
    ops = []
    for j in range(count):
        family = rng.choice(families)
        category, zh, en = FAMILIES[family]
        chinese = rng.random() < zh_share
        base = rng.choice(SUBJECTS_ZH if chinese else SUBJECTS_EN)
        subject = f"{base}{rng.randrange(30) if family in _HOBBY_FAMILIES else j}"
        transient = temporary and rng.random() < 0.1
        expiry = None
        if temporary and (transient or rng.random() < 0.05):
            expiry = rng.choice([None, None, -2 * DAY, 30 * DAY])
        observed = now_ms - rng.randrange(count // 4 + 1) * 1000 if ties else now_ms - (count - j) * 1000
        ops.append(
            FragmentOp(
                op="add",
                candidate=FragmentCandidate(
                    content=(zh if chinese else en).format(subject),
                    category=category,
                    key=key_of(family, subject),
                    transient=transient,
                    expires_at=None if expiry is None else now_ms + expiry,
                    observed_at=observed,
                ),
            )
        )
    return ops

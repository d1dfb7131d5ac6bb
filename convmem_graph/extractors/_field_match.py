"""Which generic rule can fill a custom field offline, read from its name and description.

A custom ``infer=True`` field ("pet_name", "所在城市", a Bailian profile attribute "职业") is filled
without a model when its name or description names a family the heuristic rules already read:
pet names, city, hometown, job, workplace, school, birth year, name, allergies, diet, hobbies.
Any other field needs a model (an LLM extractor); :func:`inference_source` says which, so a schema
listing can tell the user instead of leaving the field silently empty.
"""

from __future__ import annotations

import re

from convmem_graph.models import VariableSpec
from convmem_graph.text._lazy_re import LazyPattern, lazy_compile

__all__ = ["GENERIC_FIELDS", "generic_field", "inference_source"]

#: Family -> what names or describes it. Checked in order: the specific before the general
#: ("pet_name" is a pet's name, not the user's; "company" a workplace, not a job).
_FAMILIES: tuple[tuple[str, LazyPattern], ...] = (
    ("pet_names", lazy_compile(r"\bpets?\b|pet_|宠物|猫|狗|\bcats?\b|\bdogs?\b", re.IGNORECASE)),
    ("allergies", lazy_compile(r"allerg|过敏", re.IGNORECASE)),
    ("birth_year", lazy_compile(r"birth|born|出生|生日|生年|\bage\b|年龄|年纪", re.IGNORECASE)),
    ("hometown", lazy_compile(r"home_?town|家乡|老家|籍贯|故乡", re.IGNORECASE)),
    ("workplace", lazy_compile(r"employer|company|workplace|公司|单位|工作单位|雇主", re.IGNORECASE)),
    ("school", lazy_compile(r"school|university|college|学校|大学|院校", re.IGNORECASE)),
    (
        "city",
        lazy_compile(r"city|location|where .{0,20}lives?|城市|所在地|居住地|常住|住址|住在", re.IGNORECASE),
    ),
    (
        "occupation",
        lazy_compile(r"\bjobs?\b|job_|occupation|profession|career|职业|工作|岗位|行业", re.IGNORECASE),
    ),
    ("diet", lazy_compile(r"\bdiet|food|饮食|忌口|口味|吃", re.IGNORECASE)),
    ("hobbies", lazy_compile(r"hobb|interests?\b|爱好|兴趣|喜欢做", re.IGNORECASE)),
    ("name", lazy_compile(r"^(?:user_?)?name$|nickname|full_?name|姓名|名字|称呼|昵称", re.IGNORECASE)),
)
#: The families a generic rule fills.
GENERIC_FIELDS = tuple(name for name, _ in _FAMILIES)


def generic_field(spec: VariableSpec) -> str | None:
    """Return the family whose rule fills ``spec`` offline, or ``None`` when it needs a model.

    Example:
        >>> generic_field(VariableSpec(name="pet_name", description="name of the user's pet"))
        'pet_names'
        >>> generic_field(VariableSpec(name="where", description="所在城市"))
        'city'
        >>> generic_field(VariableSpec(name="team")) is None
        True
    """
    for family, rx in _FAMILIES:
        if rx.search(spec.name) or (spec.description and rx.search(spec.description)):
            return family
    return None


def inference_source(spec: VariableSpec, default_names: frozenset[str] = frozenset()) -> str:
    """Say how a field gets its value: ``manual only``, ``rule`` (with the family) or ``needs a model``.

    Args:
        spec: The field.
        default_names: Names of the default schema (filled by their own rules).

    Example:
        >>> inference_source(VariableSpec(name="favourite_team"))
        'needs a model'
        >>> inference_source(VariableSpec(name="pet_name"))
        'rule: pet_names'
    """
    if not spec.infer:
        return "manual only"
    if spec.name in default_names:
        return f"rule: {spec.name}"
    family = generic_field(spec)
    return f"rule: {family}" if family else "needs a model"

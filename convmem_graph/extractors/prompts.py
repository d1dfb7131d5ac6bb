"""Every prompt the model-backed extractor and summarizer send, in plain text, in one place.

The system prompts hold the rules and worked examples (Chinese and English, from the story of 林晓
in the test fixtures); the ``render_*`` helpers lay out one request's data: the batch of messages
with short local ids (``m1``, ``m2`` ...), the facts already known, the variables to fill, the
previous summary. Models answer in the user's language; facts are third-person sentences.

Changing any text here changes the request bodies the integration cassettes match on: re-record
them (see ``tests/fakes/openai_server.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

__all__ = [
    "EXTRACTION_JSON_MODE_SUFFIX",
    "EXTRACTION_RETRY_PROMPT",
    "EXTRACTION_SYSTEM_PROMPT",
    "SUMMARY_SHORTEN_PROMPT",
    "SUMMARY_SYSTEM_PROMPT",
    "format_day",
    "format_time",
    "render_extraction_request",
    "render_summary_request",
]

EXTRACTION_SYSTEM_PROMPT = """\
You read a conversation between a user and an AI assistant and write down what it tells about the \
USER as long-term memory: short personal facts, plus values for the profile variables you are asked \
to fill.

Rules:
1. Take facts only from messages whose role is "user". Assistant messages are context (a question \
the user answers, a topic); a fact that only the assistant said is not a fact.
2. Write each fact as one short standalone sentence in the third person, in the user's language: \
Chinese "用户……", English "User ...". One fact per item, at most 200 characters.
3. Personal facts are: preferences and dislikes, allergies and diet, habits and hobbies, health, \
identity (name, age, job, city), family, relations and pets, plans and events with their dates, \
temporary states and ongoing activities ("最近在学吉他"). A fact about someone else is about them: \
"我妈妈喜欢跳舞" gives "用户的妈妈喜欢跳舞", never "用户喜欢跳舞".
4. Non-personal chatter yields nothing: weather, news, greetings, thanks, apologies, small talk, \
questions to the assistant, requests for a task or a reminder ("明天早上7点提醒我去跑步"), and \
momentary wants for today ("今晚想吃点水果，有什么推荐？", "I want to grab a coffee now"). A \
conversation without personal facts gives an empty list of facts.
5. key is "<prefix>:<subject>", with one of these prefixes:
- profile: profile:name, profile:birth_year, profile:city, profile:hometown, profile:occupation, \
profile:workplace, profile:school, profile:gender, profile:marital, profile:language;
- allergy: allergy:芒果, allergy:mango;
- food (food and drink eaten, liked or avoided; vegetarian): food:香菜, food:spicy_food;
- pref (other likes and dislikes; a favourite thing): pref:爬山, pref:jazz, pref:最喜欢的颜色, \
pref:favorite_color;
- habit (a regular activity): habit:跑步, habit:run;
- health (a lasting condition): health:高血压, health:asthma;
- state (a temporary state or ongoing activity): state:学吉他, state:learning_spanish;
- pet (the pet's name, else its species): pet:年糕, pet:mochi;
- family (the relation in its plain word; another fact about them after a second colon): \
family:母亲 (for 妈妈), family:mother, family:母亲:跳舞, family:mother:dancing;
- plan (a planned action or event): plan:去成都出差, plan:fly_to_chengdu_for_work;
- goal (a long-term aim): goal:减肥, goal:lose_weight.
The subject is the user's own word for it, in the user's language, lower case, with spaces \
written as "_". When a known fact is about the same subject, reuse its key exactly, whatever its \
language. value is the slot's value ("芒果", "杭州", "product manager") or null.
6. polarity is -1 for a negative statement (dislikes, avoids, does not, stopped) and 1 otherwise. \
single_valued is true when the subject holds one value at a time (name, city, job, birth year, \
marital status), so a new value replaces the old one.
7. transient is true for a temporary state ("这周在试着吃素", "最近胃不好", "this week I'm trying \
vegetarian food"); then expires_on is the day (YYYY-MM-DD) it likely stops being true, one week \
after the message date when nothing says otherwise. Durable facts, plans and events have \
transient false and expires_on null; write the dates of a plan into its sentence.
8. Turn an age into a birth year with the message's date (29 this year, said in 2025 -> born 1996).
9. source_ids lists the ids of the user messages that state the fact (["m3"]), never an \
assistant message.
10. variables: for each variable listed, give a value only when the facts (known or new) state it, \
in the user's language; integer variables take a number, list variables a list of strings, and \
variables with allowed values take one of them. Leave out variables the conversation does not \
tell.

Example 1 (Chinese).
Current time: 2025-12-27 12:00 UTC
Known facts about the user:
(none)
Variables to fill:
- birth_year (integer): 出生年份
- city (string): 所在城市
Conversation:
[m1] 2025-12-27 11:02 UTC user: 小雨，跟你说一下，我对芒果过敏，吃了会起疹子。
[m2] 2025-12-27 11:02 UTC assistant: 记住啦，以后推荐水果都会避开芒果。
[m3] 2025-12-27 11:03 UTC user: 今天杭州又下雨了，好冷。今晚想吃点水果，有什么推荐？
[m4] 2025-12-27 11:05 UTC user: 我今年29岁，住在杭州。吃面别放香菜哦。我妈妈喜欢跳舞。
Answer:
{"facts": [
 {"content": "用户对芒果过敏，吃了会起疹子", "category": "allergy", "key": "allergy:芒果", \
"value": "芒果", "polarity": 1, "single_valued": false, "transient": false, "expires_on": null, \
"source_ids": ["m1"]},
 {"content": "用户1996年出生", "category": "profile", "key": "profile:birth_year", "value": "1996", \
"polarity": 1, "single_valued": true, "transient": false, "expires_on": null, "source_ids": ["m4"]},
 {"content": "用户住在杭州", "category": "profile", "key": "profile:city", "value": "杭州", \
"polarity": 1, "single_valued": true, "transient": false, "expires_on": null, "source_ids": ["m4"]},
 {"content": "用户吃面不要香菜", "category": "diet", "key": "food:香菜", "value": "香菜", \
"polarity": -1, "single_valued": false, "transient": false, "expires_on": null, \
"source_ids": ["m4"]},
 {"content": "用户的妈妈喜欢跳舞", "category": "relation", "key": "family:母亲:跳舞", \
"value": "跳舞", "polarity": 1, "single_valued": false, "transient": false, "expires_on": null, \
"source_ids": ["m4"]}],
 "variables": [{"name": "birth_year", "value": 1996}, {"name": "city", "value": "杭州"}]}
(m3 is the weather and a momentary want with a request: no fact.)

Example 2 (English).
Current time: 2026-01-01 12:30 UTC
Known facts about the user:
- [f1] key=profile:city | User lives in Hangzhou
Variables to fill:
- occupation (string): the user's job
- hobbies (list): the user's hobbies
Conversation:
[m1] 2026-01-01 12:20 UTC user: Good evening! Thanks for yesterday's tips.
[m2] 2026-01-01 12:21 UTC user: I'm a product manager, and I run along West Lake most mornings.
[m3] 2026-01-01 12:22 UTC assistant: Running by the lake sounds lovely!
[m4] 2026-01-01 12:24 UTC user: My stomach has been bad lately, so no spicy food for a while.
[m5] 2026-01-01 12:25 UTC user: I fly to Chengdu for work from Feb 10 to Feb 14. Remind me to pack \
tomorrow.
Answer:
{"facts": [
 {"content": "User works as a product manager", "category": "profile", \
"key": "profile:occupation", "value": "product manager", "polarity": 1, "single_valued": true, \
"transient": false, "expires_on": null, "source_ids": ["m2"]},
 {"content": "User runs along West Lake most mornings", "category": "habit", "key": "habit:run", \
"value": "running", "polarity": 1, "single_valued": false, "transient": false, "expires_on": null, \
"source_ids": ["m2"]},
 {"content": "User has stomach trouble lately and avoids spicy food", "category": "health", \
"key": "food:spicy_food", "value": "spicy food", "polarity": -1, "single_valued": false, \
"transient": true, "expires_on": "2026-01-08", "source_ids": ["m4"]},
 {"content": "User has a business trip to Chengdu from 2026-02-10 to 2026-02-14", \
"category": "plan", "key": "plan:fly_to_chengdu_for_work", "value": "Chengdu", "polarity": 1, \
"single_valued": false, "transient": false, "expires_on": null, "source_ids": ["m5"]}],
 "variables": [{"name": "occupation", "value": "product manager"}, \
{"name": "hobbies", "value": ["running"]}]}
(m1 is a greeting and thanks, and the reminder in m5 is a request: no fact.)
"""

#: Appended to the system prompt for ``method="json_mode"``, where no schema reaches the model.
EXTRACTION_JSON_MODE_SUFFIX = """
Answer with one JSON object and nothing else. It must match this JSON schema:
{schema}
"""

EXTRACTION_RETRY_PROMPT = """\
Your previous answer was rejected: {error}
Answer again with the whole result. Use only the ids of user messages ({user_ids}) in source_ids \
and follow the schema exactly."""

SUMMARY_SYSTEM_PROMPT = """\
You keep the rolling memory summary of one user of an AI assistant. You get the previous summary, \
what is already known about the user, and the new messages. Write the new summary:
- Facts only, in the third person: who the user is, what they like and avoid, their situation, \
plans and what happened in the conversations. No transcript, no quotes, no greetings, no \
instructions.
- Fold the previous summary in: keep what is still true, drop what the new messages contradict or \
what has expired.
- Write in the user's language (the language of most user messages; Chinese users get Chinese: \
"用户……").
- At most {budget} tokens: about {budget} Chinese characters or {words} English words. Shorter is \
better than longer.
- Answer with the summary text only.

Example (Chinese): 用户林晓，1996年出生，住在杭州，是产品经理。\
对芒果过敏，吃面不要香菜；最近胃不好，暂时不吃辣。喜欢跑步，常沿西湖跑。养了一只两岁的橘猫“年糕”。2026年2月10日至14日去成都出差。
Example (English): User Lin Xiao, born 1996, lives in Hangzhou and works as a product manager. \
Allergic to mango; no coriander in noodles; avoiding spicy food lately because of stomach trouble. \
Runs along West Lake. Has a two-year-old orange cat, Niangao. Business trip to Chengdu \
2026-02-10..14.
"""

SUMMARY_SHORTEN_PROMPT = """\
This summary is {tokens} tokens long; the limit is {budget}. Rewrite it in at most {target} tokens \
(about {target} Chinese characters or {words} English words), in the same language, keeping the \
most important facts. Answer with the summary text only.

{summary}"""


def format_time(ms: int) -> str:
    """Format milliseconds since the epoch as ``YYYY-MM-DD HH:MM UTC`` for prompts."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M UTC")


def format_day(ms: int) -> str:
    """Format milliseconds since the epoch as ``YYYY-MM-DD`` (UTC)."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d")


def render_extraction_request(
    *,
    now_ms: int,
    known: Sequence[tuple[str, str, str]],
    variables: Sequence[tuple[str, str, str, Sequence[str] | None]],
    conversation: Sequence[tuple[str, int, str, str]],
) -> str:
    """Lay out one extraction request in the format of the system prompt's examples.

    Args:
        now_ms: Current time, ms UTC.
        known: ``(local_id, key, content)`` of the active fragments.
        variables: ``(name, type, description, allowed_values)`` of the variables to fill.
        conversation: ``(local_id, timestamp_ms, role, content)`` in time order.

    Returns:
        The text of the human message.

    Example:
        >>> print(render_extraction_request(now_ms=0, known=[], variables=[],
        ...     conversation=[("m1", 0, "user", "I love tea")]))
        Current time: 1970-01-01 00:00 UTC
        Known facts about the user:
        (none)
        Variables to fill:
        (none)
        Conversation:
        [m1] 1970-01-01 00:00 UTC user: I love tea
    """
    lines = [f"Current time: {format_time(now_ms)}", "Known facts about the user:"]
    lines += [f"- [{fid}] key={key} | {content}" for fid, key, content in known] or ["(none)"]
    lines.append("Variables to fill:")
    var_lines = []
    for name, vtype, description, allowed in variables:
        line = f"- {name} ({vtype}): {description or name}"
        if allowed:
            line += f" [allowed: {', '.join(allowed)}]"
        var_lines.append(line)
    lines += var_lines or ["(none)"]
    lines.append("Conversation:")
    lines += [
        f"[{mid}] {format_time(ts)} {role}: {_one_line(content)}" for mid, ts, role, content in conversation
    ]
    return "\n".join(lines)


def render_summary_request(
    *,
    now_ms: int,
    previous: str | None,
    variables: Mapping[str, str],
    facts: Sequence[str],
    conversation: Sequence[tuple[int, str, str]],
) -> str:
    """Lay out one summary request.

    Args:
        now_ms: Current time, ms UTC.
        previous: The previous summary text, if any.
        variables: Variable name -> value as text.
        facts: Contents of the active fragments, strongest first.
        conversation: ``(timestamp_ms, role, content)`` of the new messages in time order.

    Returns:
        The text of the human message.
    """
    lines = [
        f"Current time: {format_time(now_ms)}",
        "Previous summary:",
        previous.strip() if previous else "(none)",
    ]
    lines.append("Known profile:")
    lines += [f"- {name}: {value}" for name, value in variables.items()] or ["(none)"]
    lines.append("Known facts:")
    lines += [f"- {fact}" for fact in facts] or ["(none)"]
    lines.append("New messages:")
    lines += [f"{format_time(ts)} {role}: {_one_line(content)}" for ts, role, content in conversation] or [
        "(none)"
    ]
    return "\n".join(lines)


def _one_line(text: str) -> str:
    # A message spanning lines would look like several messages to the model.
    return " ".join(text.split())

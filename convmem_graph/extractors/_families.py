"""Rule families read from the taxonomy: diets, instruments and sports, quitting, and changes.

Each family is one pattern built from a class in :mod:`convmem_graph.extractors._taxonomy`, so it
covers the whole class (any diet, any instrument) rather than the words a rule file happened to
list. They read one raw clause (fillers already stripped, change words kept) and run beside the
sentence rules of :mod:`convmem_graph.extractors._rules_zh` and
:mod:`convmem_graph.extractors._rules_en`; a fact they find under a key those rules already gave
for the message is dropped (see :func:`merge_family_facts`).

Change and negation are first-class here: "我现在吃香菜了", "I eat meat again", "我戒烟了", "I'm no
longer vegan", "I quit drinking" give a fact with the new polarity under the key of the old one
(``food:香菜``, ``food:vegan``, ``habit:抽烟``), which reconciliation turns into a supersede of the
stored fact (audit kept by the store), and the variable read from it follows.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from convmem_graph.extractors._clauses import (
    ZH_LEISURE,
    fold_lower,
    move_lead_time,
    strip_fillers,
    strip_tails,
)
from convmem_graph.extractors._facts import Fact, RuleContext
from convmem_graph.extractors._lexicon import EN_FOODS, EN_SPECIES, ZH_FOODS, ZH_RELATIONS
from convmem_graph.extractors._taxonomy import (
    ALCOHOL_ZH,
    DIETS_EN,
    DIETS_ZH,
    INSTRUMENTS_EN,
    INSTRUMENTS_ZH,
    INTOLERANCES_EN,
    INTOLERANCES_ZH,
    PAST_TIMES_ZH,
    PET_VERBS_EN,
    QUIT_ZH,
    SPORT_ACTIVITIES_EN,
    SPORT_ACTIVITIES_ZH,
    SPORTS_EN,
    SPORTS_ZH,
    alternation,
)
from convmem_graph.text._lazy_re import lazy_compile
from convmem_graph.text.cjk import UNIFIED
from convmem_graph.text.scripts import Clause, norm_key

__all__ = [
    "clause_family_facts",
    "could_state_family",
    "family_facts",
    "merge_family_facts",
    "split_allergy_lists",
]

# ----------------------------------------------------------------- Chinese

_ZH_SUBJECT = lazy_compile(r"^我(?!们)(?:自己)?")
_ZH_LEISURE_LEAD = lazy_compile(rf"^(?:{ZH_LEISURE})+")
_ZH_ADV = r"(?:也|还|都|就|又|真的|确实|其实|早就|一直|本来|平时|平常|经常|很|挺|特别)*"
_ZH_INSTR = alternation(INSTRUMENTS_ZH)
_ZH_SPORT = alternation(SPORTS_ZH)
_ZH_DIET = alternation(DIETS_ZH)
_ZH_QUIT_OBJ = alternation(QUIT_ZH)

# "现在吃香菜了", "又开始吃肉了", "开始喝咖啡了": a food eaten now (after not eating it).
_ZH_EATS_NOW = lazy_compile(
    rf"^{_ZH_ADV}(?P<mark>现在|如今|又|重新|开始|又开始|现在开始|现在也)+(?:也|又|能|敢|会|可以)?(?P<verb>吃|喝)"
    rf"(?P<obj>[{UNIFIED}]{{1,6}}?)(?:了|啦)$"
)
# "戒烟了", "戒了烟", "把酒戒了", "已经不抽烟了", "不再喝酒了": a habit given up.
_ZH_QUIT = lazy_compile(
    rf"^(?:现在|如今|后来)?{PAST_TIMES_ZH}*{_ZH_ADV}(?:已经|早就|终于|成功|刚刚|刚)?(?:戒了|戒掉了|戒)"
    rf"(?P<obj>{_ZH_QUIT_OBJ})"
    r"(?:(?:快|差不多|将近|有|都)?(?:\d{1,2}|[一二两三四五六七八九十几半]{1,3})多?个?(?:年|月)多?)?(?:了|啦)?$"
    rf"|^(?:现在|如今|后来)?{PAST_TIMES_ZH}*{_ZH_ADV}(?:已经|早就|终于)?把(?P<obj2>{_ZH_QUIT_OBJ})戒(?:掉)?了$"
    r"|^(?:已经|早就|现在)?(?:不再|不|没再)(?P<act>抽烟|吸烟|喝酒)了$"
)
# "已经两年没喝奶茶了", "好几个月没吃辣了": a food or drink not had for a long time, given up.
_ZH_NOT_HAD = lazy_compile(
    r"^(?:已经|都)?(?:好|快)?(?:\d{1,2}|[一二两三四五六七八九十几半]{1,3})多?个?(?:年|月)多?(?:都)?没(?:再)?(?P<verb>吃|喝)"
    rf"(?:过)?(?P<obj>[{UNIFIED}]{{1,5}}?)了$"
)
_ZH_NOT_VEGETARIAN = lazy_compile(
    r"^(?:现在|已经|早就)?(?:不再|不|没再)(?:吃素|是素食者?)了?$|^(?:现在|已经)?(?:开荤|破戒吃肉)了$"
)
_ZH_ACT_TO_QUIT = {"抽烟": "抽烟", "吸烟": "抽烟", "喝酒": "喝酒"}
# "咖啡一口都不碰", "辣的一点也不吃": a food put first and then refused, not even a bit.
_ZH_TOPIC_NOT = lazy_compile(
    rf"^(?:现在|如今|已经|现在已经)?(?P<obj>[{UNIFIED}]{{1,5}}?)的?(?:一口|一点|一滴|一点儿|再)?(?:都|也)(?:不|没)"
    r"(?:碰|吃|喝|沾)(?:了|过)?$"
)
# "自己开了家花店", "开了一间工作室": a business of the user's own is their work.
_ZH_OWN_BUSINESS = lazy_compile(
    rf"^(?:现在|后来|如今|[{UNIFIED}]{{2,6}}?(?:以后|之后))?(?:就)?(?:自己)?(?:在[{UNIFIED}]{{2,6}})?开了(?:一)?(?:家|个|间)"
    rf"(?P<biz>[{UNIFIED}]{{1,6}}?(?:店|馆|公司|工作室|诊所|超市|餐厅|饭店|厂|铺))$"
)
# "不再熬夜了", "再也不打游戏了", "已经不再喝可乐了": any activity given up. 不再 says a habit ended;
# what follows is the activity (a food when it is eaten or drunk), never a state or a wish
# ("不再是学生", "不再想他", "不再在北京" are other families' or nobody's).
_ZH_NO_LONGER = lazy_compile(
    r"^(?:现在|如今|已经|早就|后来)*(?:不再|再也不|再不)(?P<act>(?!是|在|想|要|会|能|喜欢|爱|怕|相信|用|需要|去|来)"
    rf"[{UNIFIED}]{{2,5}}?)了?$"
)
# "会弹古筝", "在学拉小提琴" (learning is read by the ongoing rule), "喜欢打网球" (by the likes rule).
_ZH_FREQUENCY = lazy_compile(r"平时|平常|经常|常常|每|周末|通常|一般|总是")
_ZH_PLAYS = lazy_compile(
    rf"^{_ZH_ADV}(?P<mod>会|能)?(?P<verb>弹|拉|吹|打|踢|练)(?:一点|一些|点儿?)?(?P<obj>{_ZH_INSTR}|{_ZH_SPORT})$"
)
_ZH_SPAN = r"(?:\d{1,2}|[一二两三四五六七八九十几]{1,3})多?(?:年|个月)(?:多)?的?"
# "从小学钢琴", "学过五年小提琴", "弹了十年吉他": an instrument or sport learned or played for years.
_ZH_LEARNED = lazy_compile(
    rf"^(?:[{UNIFIED}]{{1,4}}的时候)?{_ZH_ADV}(?P<how>从小就?学|小时候学过|学过|学了|弹了|拉了|吹了|打了|踢了|练了)(?P<span>{_ZH_SPAN})?"
    rf"(?P<verb>弹|拉|吹|打|踢|练)?(?P<obj>{_ZH_INSTR}|{_ZH_SPORT})$"
)
# "从初中开始打乒乓球": an instrument or sport played since then.
_ZH_SINCE_PLAYS = lazy_compile(
    rf"^{_ZH_ADV}从(?P<since>[^开起就]{{1,8}}?)就?(?:开始|起)就?(?P<verb>弹|拉|吹|打|踢|练|学)(?P<obj>{_ZH_INSTR}|{_ZH_SPORT})了?$"
)
# "会游泳", "能滑雪": a sport the user can do.
_ZH_CAN_SPORT = lazy_compile(rf"^{_ZH_ADV}(?:会|能)(?P<act>{alternation(SPORT_ACTIVITIES_ZH)})$")
# "是校篮球队的", "在乐队里打鼓": a team or band the user plays in.
_ZH_ON_TEAM = lazy_compile(
    rf"^(?:是|在)(?P<team>[{UNIFIED}]{{0,6}}?(?P<obj>{_ZH_SPORT})队)(?:的|里)?(?:队员|成员|一员)?$"
    rf"|^在(?P<band>[{UNIFIED}]{{1,6}}?)里?(?P<verb>弹|拉|吹|打)(?P<instr>{_ZH_INSTR})$"
)
_ZH_DIET_RX = lazy_compile(
    rf"^{_ZH_ADV}(?:是|吃|在吃|坚持|坚持吃|只吃|保持|遵循)?(?P<diet>{_ZH_DIET})(?:饮食|的)?(?:者)?$"
)
# A severity said with an allergy ("严重过敏", "过敏很严重"): kept in the content so it updates the
# plain allergy fact instead of repeating it.
_ZH_SEVERE_ALLERGY = lazy_compile(
    rf"^(?:对)?(?P<obj>[{UNIFIED}]{{1,6}}?)(?P<sev>严重|非常严重|特别严重|轻微|有点|有一点)过敏$"
    rf"|^(?:对)?(?P<obj2>[{UNIFIED}]{{1,6}}?)过敏(?:很|非常|特别|挺)?(?P<sev2>严重|厉害)$"
)


# "乳糖不耐受", "有乳糖不耐症", "对麸质不耐受": an intolerance is a lasting health fact.
_ZH_INTOLERANT = lazy_compile(
    rf"^{_ZH_ADV}(?:有|是)?(?:对)?(?:轻微|严重|一点|点)?(?P<obj>{alternation(INTOLERANCES_ZH)})(?:有点|有些)?不耐(?:受|症)$"
)


def _zh_family(text: str, ctx: RuleContext) -> list[Fact]:
    m = _ZH_SUBJECT.match(text)
    if m is None:
        return []
    body = text[m.end() :].rstrip("。！!，,")
    body = _ZH_LEISURE_LEAD.sub("", body) or body
    hit = _ZH_INTOLERANT.match(body)
    if hit:
        what = f"{hit['obj']}不耐受"
        return [Fact(f"用户{what}。", "health", f"health:{what}", what, confidence=0.85)]
    if _ZH_NOT_VEGETARIAN.match(body):  # the key of "我吃素" (food:素食), not food:素
        return [Fact("用户不再吃素。", "diet", "food:素食", "素食", polarity=-1, confidence=0.8)]
    hit = _ZH_EATS_NOW.match(body)
    if hit and not hit["obj"].startswith("素") and "不" not in hit["obj"]:
        obj = hit["obj"]
        if len(obj) <= 4 or obj in ZH_FOODS:
            marks = hit["mark"]
            mark = "现在" if "现在" in marks or "如今" in marks else "又" if "又" in marks else "开始"
            verb = hit["verb"]
            content = f"用户{mark}{verb}{obj}了。"
            return [Fact(content, "diet", f"food:{norm_key(obj)}", obj, polarity=1, confidence=0.8)]
    hit = _ZH_NOT_HAD.match(body)
    if hit and (hit["obj"] in ZH_FOODS or len(hit["obj"]) <= 3):
        obj = hit["obj"]
        content = f"用户不再{hit['verb']}{obj}。"
        return [Fact(content, "diet", f"food:{norm_key(obj)}", obj, polarity=-1, confidence=0.75)]
    hit = _ZH_QUIT.match(body)
    if hit:
        if hit["act"]:
            act = _ZH_ACT_TO_QUIT[hit["act"]]
            return [_zh_quit(act)]
        return [_zh_gave_up(hit["obj"] or hit["obj2"])]
    hit = _ZH_TOPIC_NOT.match(body)
    if hit and hit["obj"] in ZH_FOODS:
        obj = hit["obj"]
        content = f"用户{obj}{body[hit.end('obj') :]}。"
        return [Fact(content, "diet", f"food:{norm_key(obj)}", obj, polarity=-1, confidence=0.75)]
    hit = _ZH_OWN_BUSINESS.match(body)
    if hit:
        biz = hit["biz"]
        content = f"用户自己开了一家{biz}。"
        return [
            Fact(content, "profile", "profile:occupation", f"开{biz}", single_valued=True, confidence=0.75)
        ]
    hit = _ZH_NO_LONGER.match(body)
    if hit and not re.search(r"[你他她它谁这那]", hit["act"]):
        act = hit["act"]
        if act[0] in "吃喝" and (act[1:] in ZH_FOODS or len(act) <= 3):
            obj = act[1:]
            if act == "喝酒":
                return [_zh_quit("喝酒")]
            content = f"用户不再{act}。"
            return [Fact(content, "diet", f"food:{norm_key(obj)}", obj, polarity=-1, confidence=0.75)]
        return [_zh_quit(act)]
    hit = _ZH_SEVERE_ALLERGY.match(body)
    if hit:
        obj = hit["obj"] or hit["obj2"]
        sev = hit["sev"] or hit["sev2"]
        sev = "严重" if sev in ("严重", "非常严重", "特别严重", "厉害") else "轻微"
        content = f"用户对{obj}{sev}过敏。"
        return [Fact(content, "health", f"allergy:{norm_key(obj)}", obj, polarity=1, confidence=0.9)]
    hit = _ZH_PLAYS.match(body)
    if hit and not _ZH_FREQUENCY.search(body):  # with a frequency it is a habit the sentence rules read
        verb, obj = hit["verb"], hit["obj"]
        want = INSTRUMENTS_ZH.get(obj) or SPORTS_ZH.get(obj)
        if want is not None and (verb == want or (verb == "打" and obj in ("鼓", "架子鼓"))):
            mod = "会" if hit["mod"] in ("会", "能") else ""
            act = f"{verb}{obj}"
            content = f"用户{mod}{act}。"
            key = f"pref:{norm_key(act)}"
            return [Fact(content, "preference", key, act, confidence=0.75)]
    hit = _ZH_LEARNED.match(body)
    if hit:
        obj = hit["obj"]
        verb = INSTRUMENTS_ZH.get(obj) or SPORTS_ZH.get(obj) or ""
        how = hit["how"]
        if how[0] in "弹拉吹打踢练" and how[0] != verb and not (how[0] == "打" and obj in ("鼓", "架子鼓")):
            return []  # "打了两年钢琴" is no way to say it: not this family's
        span = hit["span"] or ""
        said = f"{how}{span}{obj}" if how[0] in "弹拉吹打踢练" else f"{how}{span}{hit['verb'] or ''}{obj}"
        act = f"{verb}{obj}"
        return [Fact(f"用户{said}。", "preference", f"pref:{norm_key(act)}", act, confidence=0.75)]
    hit = _ZH_SINCE_PLAYS.match(body)
    if hit:
        obj = hit["obj"]
        verb = INSTRUMENTS_ZH.get(obj) or SPORTS_ZH.get(obj) or ""
        if hit["verb"] in (verb, "学") or (hit["verb"] == "打" and obj in ("鼓", "架子鼓")):
            act = f"{verb}{obj}"
            content = f"用户从{hit['since']}开始{hit['verb']}{obj}。"
            return [Fact(content, "preference", f"pref:{norm_key(act)}", act, confidence=0.75)]
    hit = _ZH_CAN_SPORT.match(body)
    if hit:
        act = hit["act"]
        return [Fact(f"用户会{act}。", "preference", f"pref:{norm_key(act)}", act, confidence=0.75)]
    hit = _ZH_ON_TEAM.match(body)
    if hit:
        if hit["team"]:
            obj = hit["obj"]
            act = f"{SPORTS_ZH.get(obj, '打')}{obj}"
            content = f"用户是{hit['team']}的队员。"
        else:
            obj = hit["instr"]
            act = f"{hit['verb']}{obj}"
            if INSTRUMENTS_ZH.get(obj) != hit["verb"] and obj not in ("鼓", "架子鼓"):
                return []
            content = f"用户在{hit['band']}{act}。"
        return [Fact(content, "preference", f"pref:{norm_key(act)}", act, confidence=0.75)]
    hit = _ZH_DIET_RX.match(body)
    if hit:
        diet = DIETS_ZH[hit["diet"]]
        content = f"用户是{diet}饮食。"
        return [Fact(content, "diet", f"food:{norm_key(diet)}", diet, confidence=0.8)]
    return []


def _zh_quit(act: str) -> Fact:
    return Fact(f"用户不再{act}。", "habit", f"habit:{norm_key(act)}", act, polarity=-1, confidence=0.8)


def _zh_gave_up(obj: str) -> Fact:
    """What quitting ``obj`` (a word of ``QUIT_ZH``: 烟, 糖, 奶茶 ...) changes.

    Whatever is eaten or drunk is a food given up (``food:糖``, ``food:奶茶``); smoking, drinking
    alcohol and the rest are habits given up (``habit:抽烟``, ``habit:喝酒``).
    """
    act = QUIT_ZH[obj]
    if act[0] in "吃喝" and obj not in ("酒", "烟"):
        return Fact(f"用户不再{act}。", "diet", f"food:{norm_key(obj)}", obj, polarity=-1, confidence=0.8)
    return _zh_quit(act)


# "以前每天都喝酒", "之前一天一包烟": a habit the user had; a later clause "后来…就戒了" gives it up.
_ZH_GAVE_UP_OBJ = {act: obj for obj, act in QUIT_ZH.items()} | {"吸烟": "烟"}
# Said with how much between the verb and what ("一天抽一包烟", "一天要喝两瓶啤酒", "嚼好几包槟榔"):
# the verb of the class, a count and a measure word, then the thing (any kind of alcohol is 酒).
_ZH_HOW_MUCH = r"(?:[\d一二两三四五六七八九十几半好]{1,3}[包根支盒条瓶杯斤两罐口颗局把个]多?|点儿?|不少|很多)"
_ZH_USED_TO = lazy_compile(
    r"^我?(?:以前|之前|原来|过去|曾经|年轻的时候|年轻时)(?:[一-鿿]{0,6}?)"
    rf"(?:(?P<act>{alternation(_ZH_GAVE_UP_OBJ)})"
    rf"|(?P<verb>[抽吸喝嚼吃玩打]){_ZH_HOW_MUCH}(?P<obj>{alternation(QUIT_ZH)}|{alternation(ALCOHOL_ZH)}))"
    r"(?:[一-鿿]{0,6})$"
)
# The clause that gives it up without naming it: "后来身体不好就戒了", "现在不喝了", "去年戒掉了".
_ZH_QUIT_IT = lazy_compile(
    r"(?:^|[就才都也已经终于后来现在如今])(?:彻底|完全|终于|已经|慢慢)?"
    r"(?:戒了|戒掉了|戒掉|给戒了|不(?:抽|喝|吃|玩|打|嚼)了|不再(?:抽|喝|吃|玩|打|嚼)了)$"
)


# ----------------------------------------------------------------- English

_EN_DIET = alternation(DIETS_EN)
_EN_INSTR = alternation(INSTRUMENTS_EN)
_EN_SPORT = alternation(SPORTS_EN)
_EN_SINCE = (
    r"(?:\s+(?P<since>since\s+.{2,30}|for\s+(?:the\s+(?:last|past)\s+)?.{0,20}?(?:years?|months?|weeks?)"
    r"|(?:.{1,15}?)(?:years?|months?) ago|in \d{4}|last (?:year|month)"
    r"|(?:my|all my) (?:whole |entire )?life))?"
)
# "I've been gluten-free since 2020", "I eat halal", "I keep kosher", "I'm on a keto diet".
_EN_DIET_IS = lazy_compile(
    r"^I(?:'m| am|'ve been| have been| went| became| turned| eat| keep| follow| stick to| try to eat"
    r"| eat only)"
    r"\s+(?:a\s+|an\s+|strictly\s+|mostly\s+|fully\s+|completely\s+|pretty\s+much\s+)?"
    rf"(?:on\s+(?:a|an)\s+)?(?P<diet>{_EN_DIET})(?:\s+(?:diet|food|meals|now))?"
    + _EN_SINCE
    # When it holds, if not always: "during the week", "on weekdays", "most of the time".
    + r"(?:\s+(?P<part>during the week|on weekdays|most of the time|at home|for the most part))?$",
    re.IGNORECASE,
)
# "I'm not vegan anymore", "I'm no longer vegetarian", "I stopped being vegan", "I quit keto".
_EN_DIET_NOT = lazy_compile(
    r"^I(?:'m| am)\s+(?:not|no longer)\s+(?:a\s+)?(?P<d1>"
    + _EN_DIET
    + r")(?:\s+(?:any ?more|these days|now))?$"
    r"|^I (?:stopped|quit|gave up) (?:being\s+(?:a\s+)?)?(?P<d2>" + _EN_DIET + r")(?:\s+(?:diet|eating))?"
    r"(?:\s+(?:last \w+|.{1,15} ago|in \d{4}))?$",
    re.IGNORECASE,
)
# "I eat meat again", "I started eating meat again", "I'm eating fish again now".
_EN_EATS_AGAIN = lazy_compile(
    r"^I(?:'m| am)?\s+(?:started\s+|(?:'ve|have) started\s+|now\s+)?(?P<verb>eat|eating|drink|drinking)\s+"
    r"(?P<obj>[a-z][a-z -]{1,24}?)\s+again"
    r"(?:\s+(?:now|last \w+|this \w+|recently|(?:a|one|two|three|a few|\d+) \w+ ago))?$"
)
# "I quit smoking", "I gave up drinking", "I stopped smoking last year", "I no longer smoke".
_EN_QUIT = lazy_compile(
    r"^I(?:'ve| have)?\s+(?:finally\s+|already\s+)?(?:quit|gave up|given up|stopped)\s+"
    r"(?P<act>smoking|drinking|vaping)"
    r"(?:\s+cold turkey)?"
    r"(?:\s+(?:last \w+|(?:about |around |almost |nearly |over )?.{1,15} ago|in \w+(?: \d{4})?|for good))?$"
    r"|^I no longer (?P<act2>smoke|drink|vape)$"
    # "I don't smoke anymore", "I'm not a smoker anymore", "I'm not drinking these days".
    r"|^I(?: don't| do not|'m not| am not) (?:a )?(?P<act4>smoke|drink|vape|smoker|drinker|vaper)"
    r" (?:any ?more|these days|now)$"
    # "I haven't had a drink in three years", "I haven't touched a cigarette since college".
    r"|^I (?:haven't|have not) (?:had|touched) (?:a |any )?(?P<act3>drink|alcohol|cigarette|smoke)s?"
    r"(?: in .{1,20}| since .{2,30}| for .{1,20})$"
)
# The key is the plain verb, as the habit rules write it ("I smoke every day" -> ``habit:smoke``).
# "I quit coffee last month", "I gave up sugar two years ago": a food or drink given up.
_EN_QUIT_FOOD = lazy_compile(
    r"^I(?:'ve| have)?\s+(?:finally\s+|already\s+)?(?:quit|gave up|given up|stopped|cut out)\s+"
    r"(?P<obj>[a-z][a-z -]{1,20}?)"
    r"(?:\s+(?:last \w+|(?:about |almost |around )?.{1,20} ago|in \d{4}|in [A-Z]\w+|for good|completely))?$",
    re.IGNORECASE,
)
_EN_ACT = {"smoking": "smoke", "smoke": "smoke", "drinking": "drink", "drink": "drink"}
_EN_ACT |= {"alcohol": "drink", "cigarette": "smoke"}
_EN_ACT |= {"vaping": "vape", "vape": "vape"}
_EN_ACT |= {"smoker": "smoke", "drinker": "drink", "vaper": "vape"}
_EN_ACT_SAY = {"smoke": "smokes", "drink": "drinks alcohol", "vape": "vapes"}
# "I used to smoke, but I stopped last year": the second clause gives up what the first one named.
_EN_USED_TO = lazy_compile(
    r"^I used to (?P<act>smoke|drink|vape)(?:\s+(?:a lot|heavily|socially|daily|every \w+|on weekends"
    # how much: "a pack a day", "two packs a day", "a bottle of wine a night"
    r"|(?:a|one|two|three|half a|\d+) [\w ]{1,20}? (?:a|per|every) (?:day|night|week)))?$",
    re.IGNORECASE,
)


def _may_used_to(text: str) -> bool:
    """Whether ``text`` may hold ``_EN_USED_TO``'s "used to" (case folded as ``re.IGNORECASE`` does).

    Stripping fillers and tails and moving a leading time, as the reader does first, adds no
    words, so the raw clause holds the words of any match.
    """
    return "used to" in fold_lower(text)


_EN_STOPPED_IT = lazy_compile(
    r"^(?:but\s+|and\s+)?(?:now\s+)?I(?:'ve| have)?\s+(?:finally\s+|already\s+)?"
    r"(?:stopped|quit|gave up|given up|gave (?:it|that) up|given (?:it|that) up|kicked the habit)"
    r"(?:\s+(?:it|that))?(?:\s+(?:last \w+|(?:about |almost )?.{1,15} ago|in \d{4}|in \w+|for good|years ago"
    r"|when .{2,40}|after .{2,40}))?"
    # "... and haven't touched it since", "... and never looked back": how it went since.
    r"(?:,?\s+and\s+(?:I\s+)?(?:haven't|have not|never) [\w' ]{2,30})?$",
    re.IGNORECASE,
)


def _en_quit(act: str) -> Fact:
    return Fact(
        f"User no longer {_EN_ACT_SAY[act]}.", "habit", f"habit:{act}", act, polarity=-1, confidence=0.8
    )


# "I play the cello", "I can play the guitar", "I play tennis", "I've played piano for years".
_EN_PLAYS = lazy_compile(
    r"^I(?:\s+(?P<mod>can|also|still|often|sometimes|mostly))?"
    r"(?:\s+play|'ve played|\s+have played|'ve been playing|\s+have been playing)\s+"
    rf"(?P<the>the\s+)?(?P<obj>{_EN_INSTR}|{_EN_SPORT})"
    r"(?:\s+(?:for\s+.{1,20}?(?:years?|months?)|since\s+.{2,20}|a lot|well|too|as well"
    r"|in (?:a|an|the|my|our) [\w -]{0,20}?(?:band|orchestra|ensemble|group|choir|club|league|team|trio"
    r"|quartet|quintet|duo))){0,2}(?:\s+(?:on (?:\w+days?|weekends)|at church|at night))?"
    r"(?:\s*,\s*(?:mostly|mainly|especially)\s+[\w' -]{1,30})?$",
    re.IGNORECASE,
)
# "I go hiking", "I do yoga", "I run marathons", "I go climbing on weekends": a sport done, said
# without a count (with "three times a week" or "every day" the habit rules read it).
_EN_GO = alternation(SPORT_ACTIVITIES_EN["go"])
_EN_DO = alternation(SPORT_ACTIVITIES_EN["do"])
_EN_BARE = alternation(SPORT_ACTIVITIES_EN["bare"])
_EN_DOES_SPORT = lazy_compile(
    r"^I(?:\s+(?:also|still|often|sometimes|mostly|regularly))?\s+"
    rf"(?:(?P<go>go)\s+(?P<g>{_EN_GO})|(?P<do>do|practi[cs]e)\s+(?P<d>{_EN_DO})"
    rf"|(?P<b>{_EN_BARE})(?:\s+(?P<bo>marathons|half[- ]marathons|ultramarathons|triathlons|laps|trails))?)"
    r"(?:\s+(?P<when>on (?:the )?weekends|on \w+days(?: and \w+days)?(?: after work| before work)?|after work"
    r"|before work|in the (?:mornings?|evenings?)|in my (?:free|spare) time|a lot|competitively))?$",
    re.IGNORECASE,
)
# "I play in a soccer league on Sundays", "I'm on a volleyball team": the sport is played.
_EN_PLAYS_IN = lazy_compile(
    r"^I(?:\s+play\s+(?:in|on|for)|'m on|'m in| am on| am in)\s+(?:a|an|the|my|our|a local)\s+"
    rf"(?:local\s+|amateur\s+|weekly\s+|company\s+)?(?P<obj>{_EN_SPORT})\s+(?:league|team|club)\b.{{0,30}}$",
    re.IGNORECASE,
)
_EN_SEVERE = lazy_compile(
    r"^I(?:'m| am)\s+(?P<sev>severely|seriously|deathly|extremely|highly|mildly|slightly|a (?:little|bit))\s+"
    r"allergic to\s+(?P<obj>[a-z][a-z -]{1,24})$"
    r"|^I have (?:a\s+)?(?P<sev2>severe|serious|mild|slight)\s+(?P<obj2>[a-z][a-z -]{1,24}?)\s+allergy$"
    r"|^I have (?:a|an)\s+(?P<obj3>[a-z][a-z -]{1,24}?)\s+allergy$",
    re.IGNORECASE,
)
_EN_PET_GATE = lazy_compile(
    r"^(?:(?:last|this) \w+,? |(?:a|one|two|three|a few|\d+) \w+ ago,? |recently,? )?"
    r"(?:[Ww]e|[Mm]y [a-z-]+ and I)(?:'ve| have)?\s+"
    rf"(?:(?:just\s+|recently\s+|finally\s+)?(?:{alternation(PET_VERBS_EN)})\b"
    r"|(?:a|an|one|two|three|four|\d+) )",
    re.IGNORECASE,
)
_EN_BAD_OBJ = lazy_compile(
    r"\b(?:you|your|it|that|this|them|something|anything|lunch|dinner|breakfast)\b", re.IGNORECASE
)


# "I have lactose intolerance", "I'm fructose intolerant", "I'm celiac": the key the health rules
# give "I'm lactose intolerant" and "I have celiac disease".
_EN_INTOLERANT = lazy_compile(
    r"^I(?:'m| am| have| have got|'ve got)\s+(?:(?:a|an|mild|severe|slight)\s+)*"
    rf"(?P<obj>{alternation(INTOLERANCES_EN)})\s+intoleran(?:t|ce)$|^I(?:'m| am)\s+(?P<celiac>c(?:o)?eliac)$",
    re.IGNORECASE,
)


#: What ``^I`` matches first, ``re.IGNORECASE`` included (Python folds ``İ`` and ``ı`` onto ``i``).
_I_FIRST = frozenset("Ii\u0130\u0131")


def _en_family(text: str) -> list[Fact]:
    s = text.strip().rstrip(".!")
    if s[:1] not in _I_FIRST:
        # Every pattern below opens with ``^I`` (:data:`EN_I_PATTERNS`): three clauses in four
        # start otherwise, and trying the eleven there cost more than the rest of the families.
        return []
    m = _EN_INTOLERANT.match(s)
    if m:
        if m["celiac"]:
            return [Fact("User has celiac disease.", "health", "health:celiac_disease", "celiac disease")]
        what = f"{m['obj'].lower()} intolerant"
        return [Fact(f"User is {what}.", "health", f"health:{norm_key(what)}", what, confidence=0.85)]
    m = _EN_DIET_NOT.match(s)
    if m:
        diet = DIETS_EN[(m["d1"] or m["d2"]).lower()]
        return [
            Fact(
                f"User is no longer {diet}.",
                "diet",
                f"food:{norm_key(diet)}",
                diet,
                polarity=-1,
                confidence=0.8,
            )
        ]
    m = _EN_DIET_IS.match(s)
    if m:
        diet = DIETS_EN[m["diet"].lower()]
        since = m["since"] or ""
        if since.startswith(("since", "for")):
            content = f"User has been {diet} {since}."
        elif since.startswith(("my ", "all my ")):  # "my whole life"
            content = f"User has been {diet} {since.replace('my ', 'their ', 1)}."
        elif since:
            content = f"User went {diet} {since}."  # "two years ago", "in 2020", "last year"
        else:
            content = f"User is {diet}."
        if m["part"]:  # holds only then: "User is low-carb during the week."
            content = f"{content[:-1]} {m['part']}."
        return [Fact(content, "diet", f"food:{norm_key(diet)}", diet, confidence=0.85)]
    m = _EN_EATS_AGAIN.match(s)
    if m and not _EN_BAD_OBJ.search(m["obj"]):
        obj = m["obj"].strip()
        verb = "eats" if m["verb"].startswith("eat") else "drinks"
        if obj in EN_FOODS or len(obj.split()) <= 2:
            return [Fact(f"User {verb} {obj} again.", "diet", f"food:{norm_key(obj)}", obj, confidence=0.8)]
    m = _EN_QUIT.match(s)
    if m:
        said = (m["act"] or m["act2"] or m["act3"] or m["act4"]).lower()
        return [_en_quit(_EN_ACT[said])]
    m = _EN_QUIT_FOOD.match(s)
    if m and m["obj"].lower() in ("alcohol", "booze", "liquor"):  # drinking is a habit, not a food
        return [_en_quit("drink")]
    if m and m["obj"].lower() in EN_FOODS:
        obj = m["obj"].lower()
        return [
            Fact(f"User gave up {obj}.", "diet", f"food:{norm_key(obj)}", obj, polarity=-1, confidence=0.8)
        ]
    m = _EN_SEVERE.match(s)
    if m:
        obj = (m["obj"] or m["obj2"] or m["obj3"]).strip().lower()
        sev = (m["sev"] or m["sev2"] or "").lower()
        if _EN_BAD_OBJ.search(obj):
            return []
        word = (
            "severely"
            if sev in ("severely", "seriously", "deathly", "extremely", "highly", "severe", "serious")
            else ("mildly" if sev else "")
        )
        content = f"User is {word + ' ' if word else ''}allergic to {obj}."
        return [Fact(content, "health", f"allergy:{norm_key(obj)}", obj, confidence=0.9)]
    m = _EN_PLAYS_IN.match(s)
    if m and not _EN_BAD_OBJ.search(s):
        act = f"play {m['obj'].lower()}"
        return [
            Fact(
                f"User plays {m['obj'].lower()}.", "preference", f"pref:{norm_key(act)}", act, confidence=0.75
            )
        ]
    m = _EN_DOES_SPORT.match(s)
    if m:
        when = f" {m['when']}" if m["when"] else ""
        if m["go"]:
            act = m["g"].lower()
            return [
                Fact(f"User goes {act}{when}.", "preference", f"pref:{norm_key(act)}", act, confidence=0.75)
            ]
        if m["do"]:
            act = m["d"].lower()
            return [
                Fact(f"User does {act}{when}.", "preference", f"pref:{norm_key(act)}", act, confidence=0.75)
            ]
        verb = m["b"].lower()
        act = f"{verb} {m['bo'].lower()}" if m["bo"] else verb
        said = f"{_third_s(verb)} {m['bo'].lower()}" if m["bo"] else _third_s(verb)
        content = f"User {said}{when}."
        return [Fact(content, "preference", f"pref:{norm_key(act)}", act, confidence=0.7)]
    took_up = _en_took_up(s)
    if took_up:
        return took_up
    m = _EN_PLAYS.match(s)
    if m:
        obj = m["obj"].lower()
        the = "the " if obj in INSTRUMENTS_EN else ""
        act = f"play {the}{obj}"
        can = "can " if (m["mod"] or "").strip().lower() == "can" else ""
        content = f"User {can}{'play' if can else 'plays'} {the}{obj}."
        return [Fact(content, "preference", f"pref:{norm_key(act)}", act, confidence=0.75)]
    return []


# "I've gotten really into bouldering", "I got into knitting during the pandemic", "I picked up the
# violin again", "I took up running": an activity taken up is one the user likes. Without an
# intensifier ("got into college", "picked up groceries") only an activity counts: an -ing word, an
# instrument or a sport of the taxonomy.
_EN_TOOK_UP = lazy_compile(
    r"^I(?P<aux>'ve| have)?\s+(?:recently\s+|just\s+|finally\s+)?"
    r"(?P<verb>gotten|got|been getting|picked up|taken up|took up|started getting)\s+"
    r"(?P<intens>(?:really|super|very|totally|so|big time|seriously)\s+)?(?P<into>into\s+)?"
    r"(?P<the>the\s+)?(?P<obj>[a-z][a-z' -]{1,30}?)"
    r"(?P<when>\s+(?:again|lately|recently|these days|(?:this|last) \w+|during [\w ]{2,20}|in \d{4}"
    r"|(?:a|one|two|three|a few|\d+) \w+ ago)(?:\s+(?:again|lately|recently|(?:this|last) \w+))?)?$",
    re.IGNORECASE,
)


#: The patterns ``_en_family`` tries, each anchored at ``^I`` in every branch (a test checks it).
EN_I_PATTERNS = (
    _EN_INTOLERANT,
    _EN_DIET_NOT,
    _EN_DIET_IS,
    _EN_EATS_AGAIN,
    _EN_QUIT,
    _EN_QUIT_FOOD,
    _EN_SEVERE,
    _EN_PLAYS_IN,
    _EN_DOES_SPORT,
    _EN_TOOK_UP,
    _EN_PLAYS,
)


def _en_took_up(s: str) -> list[Fact]:
    m = _EN_TOOK_UP.match(s)
    if m is None:
        return []
    verb, obj = m["verb"].lower(), m["obj"].lower().strip()
    taken_up = verb in ("picked up", "taken up", "took up")
    if taken_up == bool(m["into"]) or _EN_BAD_OBJ.search(obj):
        return []  # "got the job", "picked up into ..." are other things
    if obj in INSTRUMENTS_EN:
        act, said = f"play the {obj}", f"the {obj}"
    elif obj in SPORTS_EN:
        act, said = f"play {obj}", obj
    elif obj.endswith("ing") and " " not in obj or any(obj in acts for acts in SPORT_ACTIVITIES_EN.values()):
        act, said = obj, obj
    elif m["intens"] and m["into"] and len(obj.split()) <= 3:
        act, said = obj, obj
    else:
        return []
    aux = "has " if m["aux"] else ""
    verb = {"got": "got", "gotten": "gotten", "took up": "took up"}.get(verb, verb)
    if not aux and verb in ("gotten", "taken up", "been getting"):
        aux = "has "
    content = f"User {aux}{verb} {(m['intens'] or '').lower()}{m['into'] or ''}{said}{(m['when'] or '')}."
    return [Fact(content, "preference", f"pref:{norm_key(act)}", act, confidence=0.75)]


def _third_s(verb: str) -> str:
    """Third person of a sport verb: run -> runs, box -> boxes."""
    return verb + ("es" if verb.endswith(("x", "sh", "ch", "s")) else "s")


# ----------------------------------------------------------------- entry points


# "We moved to Leeds", "We live in Raleigh": the household's home, the user's too.
_EN_HOME_GATE = lazy_compile(
    r"\b(?:[Ww]e|[Mm]y [a-z-]+ and I)(?:'ve| have)?\s+(?:just\s+|recently\s+|finally\s+|now\s+|still\s+)?"
    r"(?:moved|relocated|settled|live|lived|are living)\s+(?:to|in)\s+[A-Z]"
)


_EN_OUR_PET_GATE = lazy_compile(rf"\b[Oo]ur (?:{alternation(EN_SPECIES)}) [A-Z]")


#: Words every match of ``_EN_HOME_GATE`` holds one of ("live" also in "lived"), case as written.
_HOME_WORDS = ("live", "moved", "settled", "relocated", "living")


def _may_home(text: str) -> bool:
    """Whether ``text`` may hold a match of ``_EN_HOME_GATE`` (a gate: a plain substring test).

    ``_EN_HOME_GATE`` and ``_EN_OUR_PET_GATE`` start with a word boundary, which no scan can skip
    to: tried at every character, they cost more than the rules of the sentences they let through.
    """
    for word in _HOME_WORDS:
        if word in text:
            return True
    return False


def _may_our_pet(text: str) -> bool:
    """Whether ``text`` may hold a match of ``_EN_OUR_PET_GATE`` ("our " or "Our ")."""
    return "our " in text or "Our " in text


def could_state_family(text: str) -> bool:
    """Cheap gate for English text the sentence rules' first-person gate misses ("We adopted ...")."""
    return (
        _EN_PET_GATE.search(text) is not None
        or (_may_home(text) and _EN_HOME_GATE.search(text) is not None)
        or (_may_our_pet(text) and _EN_OUR_PET_GATE.search(text) is not None)
    )


def family_facts(raw: str, *, zh: bool, ctx: RuleContext) -> list[Fact]:
    """Facts the taxonomy families read in one clause (fillers stripped, change words kept).

    Example:
        >>> from datetime import date
        >>> ctx = RuleContext(0, date(2026, 1, 1), 480, 7 * 86_400_000)
        >>> [f.content for f in family_facts("我现在吃香菜了", zh=True, ctx=ctx)]
        ['用户现在吃香菜了。']
        >>> [f.key for f in family_facts("I've been gluten-free since 2020", zh=False, ctx=ctx)]
        ['food:gluten-free']
    """
    return _zh_family(raw, ctx) if zh else _en_family(raw)


_ZH_OWN = lazy_compile(rf"^我(?!们)(?!的?(?:{ZH_RELATIONS}))")
_ZH_SOMEONE = lazy_compile(rf"^(?:他|她|它|你|您|我们|咱们|大家|别人|朋友|同事|我的?(?:{ZH_RELATIONS}))")


def clause_family_facts(clauses: Sequence[Clause], ctx: RuleContext) -> list[Fact]:
    """Family facts of a message's clauses; a Chinese clause without a subject inherits the user.

    "我以前抽烟，现在已经戒烟了": the second clause has no subject and follows one about the user,
    so it is read as "我现在已经戒烟了"; after a clause about someone else ("他…", "我妈妈…") it is not.
    """
    facts: list[Fact] = []
    sentence, owner = -1, ""
    used_to = ""  # a habit the user said they used to have: "I stopped" after it gives it up
    for n, clause in enumerate(clauses):
        if clause.sentence != sentence:
            sentence, owner = clause.sentence, ""
        if clause.question and not clause.zh and not _may_used_to(clause.text):
            # An English question changes nothing below but ``used_to`` (a family reads no
            # question, and ``_EN_STOPPED_IT`` is taken only outside one): without "used to" it
            # is passed by before its fillers and tails are stripped (issue 24).
            continue
        text = strip_fillers(clause.text, zh=clause.zh)
        if not clause.zh:
            text = move_lead_time(strip_tails(text))
            past = _EN_USED_TO.match(text)
            if past:
                used_to = _EN_ACT[past["act"].lower()]
                continue
            if used_to and _EN_STOPPED_IT.match(text) and not clause.question:
                facts.append(_en_quit(used_to))
                used_to = ""
                continue
        if clause.zh:
            past_zh = _ZH_USED_TO.match(text)
            if past_zh and not _ZH_QUIT_IT.search(text):
                said = past_zh["obj"] or ""
                used_to = _ZH_GAVE_UP_OBJ[past_zh["act"]] if past_zh["act"] else ALCOHOL_ZH.get(said, said)
            elif used_to and _ZH_QUIT_IT.search(text) and not clause.question and not _ZH_SOMEONE.match(text):
                facts.append(_zh_gave_up(used_to))
                used_to = ""
                continue
            if _ZH_OWN.match(text):
                owner = "user"
            elif _ZH_SOMEONE.match(text):
                owner = "other"
            elif owner == "user":
                text = "我" + text
        if not clause.question:
            found = family_facts(text, zh=clause.zh, ctx=ctx)
            if clause.zh and found and _lost_later(clauses, n):
                # "小时候学过几年钢琴，现在基本都忘了": learned once and let go is no liking now.
                found = [f for f in found if not (f.key.startswith("pref:") and "过" in f.content)]
            facts.extend(found)
    return facts


# A later clause that says a skill is gone: "现在基本都忘了", "后来就没再弹了", "早就荒废了".
_ZH_LOST = lazy_compile(
    r"忘(?:了|光了|得差不多了|记了)|荒废了|放弃了|没(?:再)?(?:弹|拉|吹|打|踢|练|碰)(?:过)?了|不(?:弹|拉|吹|练|碰)了"
)


def _lost_later(clauses: Sequence[Clause], n: int) -> bool:
    return any(
        c.sentence == clauses[n].sentence and _ZH_LOST.search(c.text) is not None for c in clauses[n + 1 :]
    )


# A habit quit supersedes the transient "quitting" state the sentence rules read ("戒酒" -> state).
_QUITTING_STATE = lazy_compile(r"^state:戒")


def merge_family_facts(facts: list[Fact], extra: Sequence[Fact]) -> list[Fact]:
    """Add family facts under keys the sentence rules did not give, or where they say more.

    The family reads the change or severity the sentence rules drop ("严重过敏" vs "过敏", "现在吃"),
    so on a shared key with another polarity, a longer wording or a better key (``food:素食`` for
    ``food:素``) the family's fact replaces theirs; a quit habit also replaces the transient "戒X"
    state.
    """
    if not extra:
        return facts
    quits = any(f.polarity < 0 and f.content.startswith("用户不再") for f in extra)
    family = list(extra)
    kept: list[Fact] = []
    for f in facts:
        if quits and _QUITTING_STATE.match(f.key):
            continue
        twin = next((e for e in family if _same_subject(f.key, e.key)), None)
        if twin is None:
            kept.append(f)
        elif twin.key == f.key and twin.polarity == f.polarity and not _says_more(twin.content, f.content):
            # The same fact said as fully by the sentence rules ("User has been vegan since 2017."):
            # theirs stays; the family's wins only with more (a severity), a flip or a better key.
            family.remove(twin)
            kept.append(f)
    return kept + family


def _says_more(longer: str, shorter: str) -> bool:
    """Whether ``longer`` is ``shorter`` with words added ("对芒果严重过敏" over "对芒果过敏")."""
    rest = iter(longer.rstrip("。."))
    return len(longer) > len(shorter) and all(ch in rest for ch in shorter.rstrip("。."))


def _same_subject(a: str, b: str) -> bool:
    """One key, or one prefix with one subject inside the other (``food:素`` and ``food:素食``)."""
    if a == b:
        return True
    pa, _, sa = a.partition(":")
    pb, _, sb = b.partition(":")
    return pa == pb and bool(sa) and bool(sb) and ":" not in sa + sb and (sa in sb or sb in sa)


# Items of an allergy list: "花生和芒果", "cats, dogs and pollen", "shellfish or nuts".
_LIST_ZH = lazy_compile(r"和|、|与|跟|以及|及")
_LIST_EN = lazy_compile(r"\s*,\s*(?:and\s+|or\s+)?|\s+(?:and|or)\s+")


def split_allergy_lists(facts: list[Fact]) -> list[Fact]:
    """One allergy fact per allergen: "对花生和芒果过敏" is two facts, each its own key.

    Each allergen can then change on its own ("我现在对芒果不过敏了" supersedes only the mango).

    Example:
        >>> fact = Fact("用户对花生和芒果过敏。", "health", "allergy:花生和芒果", "花生和芒果")
        >>> [f.key for f in split_allergy_lists([fact])]
        ['allergy:花生', 'allergy:芒果']
    """
    out: list[Fact] = []
    for f in facts:
        value = f.value or ""
        if not f.key.startswith("allergy:") or ":" in f.key[len("allergy:") :] or value not in f.content:
            out.append(f)
            continue
        items = [i.strip() for i in (_LIST_ZH if _has_han(value) else _LIST_EN).split(value) if i.strip()]
        if len(items) < 2 or any(len(i) > 24 for i in items):
            out.append(f)
            continue
        for item in items:
            key = f"allergy:{norm_key(item)}"
            content = f.content.replace(value, item, 1)
            out.append(
                Fact(
                    content,
                    f.category,
                    key,
                    item,
                    polarity=f.polarity,
                    single_valued=f.single_valued,
                    transient=f.transient,
                    expires_at=f.expires_at,
                    confidence=f.confidence,
                )
            )
    return out


_HAN = lazy_compile(f"[{UNIFIED}]")


def _has_han(text: str) -> bool:
    return _HAN.search(text) is not None

"""Chinese first-person statement rules of the heuristic extractor.

Each clause is cleaned (fillers, requests, time/habit/temporary markers), its subject decided
(explicit 我, an inherited omitted subject, or someone else), then matched against the rules below
in order; the first rule that matches wins. Output is third person: "用户对芒果过敏。".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from convmem_graph.extractors._facts import Fact, RuleContext
from convmem_graph.extractors._lexicon import (
    ZH_FOODS,
    ZH_JOB_RE,
    ZH_PLACE_RE,
    ZH_RELATIONS,
    ZH_SPECIES_RE,
    zh_relation,
)
from convmem_graph.extractors._taxonomy import PAST_TIMES_ZH, PET_SPECIES_ZH, PET_VERBS_ZH, alternation
from convmem_graph.text._lazy_re import lazy_compile
from convmem_graph.text.cjk import UNIFIED
from convmem_graph.text.scripts import Clause, has_cjk, norm_key
from convmem_graph.text.timeexpr import TimeMatch, cn_int, find_zh, past_date_zh, render_zh

__all__ = ["extract_zh_sentence"]

_MEMO_PREFIX = lazy_compile(r"^(?:请|你)?(?:要)?(?:帮我)?(?:记住|记一下|记好|别忘了)(?:了)?[，,：:\s]*")
_REQUEST = lazy_compile(
    r"提醒我|提醒一下|帮我|帮忙|^给我|你给我|告诉我|跟我说|你能|你可以|你会不会|能不能|可不可以|可以帮|麻烦你|"
    r"请你|你帮|闹钟|推荐一?下|有什么推荐|有啥推荐"
)
_QUESTION_END = lazy_compile(
    r"(?:吗|么|嘛)$|^(?:为什么|怎么|是不是|能不能|可不可以|要不要|有没有|你觉得|你知道)"
)
_FILLERS = lazy_compile(
    r"^(?:(?:对了|对对对?|对啊|对呀|是的|没错|还有(?=[，,\s]|我)|而且|另外|其实|嗯+|哦+|噢+|啊+|哈哈+|嘿嘿|然后|所以|"
    r"不过|但是|可是|因为|就是|反正|话说|顺便说一下|顺便说下|顺便|说真的|我跟你说|跟你说|告诉你|说起来|还|也|就)[，,\s]*)+"
)
_HABIT = lazy_compile(
    r"平时|平常|日常|每天(?:早上|晚上|中午|下午|早晨)?|天天|每晚|每早|每周[一二三四五六日天末]?|每个?周末|"
    r"每个?星期[一二三四五六日天]?|周末都|每个月|经常|常常|通常|一般(?!般)|总是|向来|习惯性?地?|每年"
)
# When a habit happens, said before its frequency word: "周末经常", "下班后一般", "晚上通常".
_HABIT_WHEN = lazy_compile(
    r"((?:周末|晚上|早上|早晨|中午|下午|傍晚|睡前|饭后|下班后|下班以后|放学后|工作日|平日|假期|节假日|放假|休息日"
    r"|有空|有时间|空闲)(?:的时候|时)?)(?:也|还|都|就)?"
)
_TEMP = lazy_compile(r"最近|近期|近来|这几天|这些天|这段时间|这段日子|这阵子|这一阵|目前|暂时|眼下")
_THIS_WEEK = ("这周", "本周", "这个星期", "这星期", "这礼拜", "这个礼拜")
# Someone else as the subject, also an indefinite someone said with an adverb ("总有人…", "有的人…").
_OTHER_SUBJECT = lazy_compile(
    r"^(?:他们|她们|它们|他|她|它|你们|你|您|咱们|我们|大家|别人|(?:总|老|总是|老是)?(?:有人|有的人)|人家|朋友|同事|老板"
    r"|一些人|某些人)"
)
_ADVERBS = lazy_compile(r"^(?:也|还|就|都|又|真的|确实|其实|已经|一直|本来)+")
_TRAIL_CHARS = "了啦呀啊哦哈呢嘛喔噢哟吧"
# Words of the lexicons that end in a particle's character ("二哈", a husky): kept whole.
_ENDS_LIKE_PARTICLE = tuple(w for w in PET_SPECIES_ZH if w[-1] in _TRAIL_CHARS and len(w) > 1)


def _strip_trail(text: str) -> str:
    """Drop sentence-final particles ("了", "啦", "哈" ...), never a word's own end ("养了一只二哈")."""
    out = text
    while out and out[-1] in _TRAIL_CHARS and not out.endswith(_ENDS_LIKE_PARTICLE):
        out = out[:-1]
    return out


def _place(text: str) -> bool:
    return ZH_PLACE_RE.fullmatch(text) is not None


def _job(text: str) -> bool:
    return ZH_JOB_RE.match(text) is not None


def _third(text: str) -> str:
    """Rewrite first-person words inside an object phrase (我的猫 -> 自己的猫)."""
    return (
        text.replace("我们", "他们").replace("我的", "自己的").replace("我家", "自己家").replace("我", "自己")
    )


@dataclass(slots=True)
class _Clause:
    body: str
    habit: str
    temp: str
    when: TimeMatch | None
    done: bool = False


Rule = Callable[[_Clause, RuleContext], list[Fact] | None]


# ----------------------------------------------------------------- identity

# "叫做/叫作" names a thing ("这道菜叫做回锅肉"), never the user.
_NAME = lazy_compile(
    rf"^(?:叫(?![做作])|名叫|的名字(?:是|叫)|名字(?:是|叫))"
    rf"([{UNIFIED}·]{{2,4}}|[A-Za-z][A-Za-z .'-]{{0,30}})$"
)
# "叫我小林就行": what the user wants to be called.
_CALL_ME = lazy_compile(
    rf"^(?:就|可以)?叫我([{UNIFIED}]{{2,4}}?|[A-Za-z][A-Za-z .'-]{{0,30}}?)(?:就行|就好|就可以|吧|好了)?$"
)
# "我是李雷": a self-introduction only when the word after 是 looks like a personal name.
_SELF_IS = lazy_compile(rf"^是([{UNIFIED}]{{2,4}})$")
#: Characters a name never contains: function words, pronouns, verbs of the rules themselves.
_NOT_IN_NAME = lazy_compile(
    r"[的了是在有我你他她它们叫吗呢吧啊么也都就还和跟与很太不没这那什怎去吃喝喜欢爱想要会每说做]"
)
_SURNAMES = frozenset(
    """
    王 李 张 刘 陈 杨 黄 赵 吴 周 徐 孙 马 朱 胡 郭 何 高 林 罗 郑 梁 谢 宋 唐 许 韩 冯 邓 曹 彭 曾 肖 田
    董 袁 潘 于 蒋 蔡 余 杜 叶 程 苏 魏 吕 丁 任 沈 姚 卢 姜 崔 钟 谭 陆 汪 范 金 石 廖 贾 夏 韦 付 方 白
    邹 孟 熊 秦 邱 江 尹 薛 闫 段 雷 侯 龙 史 陶 黎 贺 顾 毛 郝 龚 邵 万 钱 严 覃 武 戴 莫 孔 向 汤 常 温 康
    施 文 牛 樊 葛 邢 安 齐 易 乔 伍 庞 颜 倪 庄 聂 章 鲁 岳 翟 殷 詹 申 欧 耿 关 兰 焦 俞 左 柳 甘 祝 包 宁
    尚 符 舒 阮 柯 纪 梅 童 凌 毕 单 季 裴 霍 涂 成 苗 谷 盛 曲 翁 冉 骆 蓝 路 游 辛 靳 管 柴 蒙 鲍 华 喻 祁
    蒲 房 滕 屈 饶 解 牟 艾 尤 阳 时 穆 农 司 卓 古 吉 缪 简 车 项 连 芦 麦 褚 娄 窦 戚 岑 景 党 宫 费 卜 冷
    晏 席 卫 米 柏 宗 瞿 桂 全 佟 应 臧 闵 苟 邬 边 卞 姬 师 和 仇 栾 隋 商 刁 沙 荣 巫 寇 桑 郎 甄 丛 仲 虞
    敖 巩 明 佘 池 查 麻 苑 迟 邝 官 封 谈 匡 鞠 惠 荆 乐 冀 郁 胥 南 班 储 原 栗 燕 楚 鄢 劳 谌 奚 皮 粟 冼
    蔺 楼 盘 满 闻 位 厉 伊 仝 区 郜 海 阚 花 权 强 帅 屠 豆 朴 隆 耗 欧阳 司马 诸葛 上官 东方 慕容 令狐 皇甫
    公孙 端木 长孙 宇文 司徒 夏侯 尉迟
    """.split()
)
# Words of two to four characters that open with a surname or 小/老/阿 but are not names.
_NOT_NAMES = lazy_compile(
    r"^(?:小白|小孩子?|小朋友|小学生?|小伙子?|小姑娘|小可爱|小仙女|小透明|小公主|老大|老二|老三|老幺|老板|老师|老乡|老人家?|"
    r"老手|老司机|老实人|阿姨|高手|高个子?|高中生|方便|明白|单身|安全|全职|文科生|理科生|乐观|宅男|宅女|宁愿|"
    # adjectives and roles that open with a surname character ("我是温柔" is rare, but not a name)
    r"高兴|高冷|温柔|温和|安静|严肃|单纯|成熟|强壮|冷静|冷漠|简单|白痴|路痴|孤儿|常客|熟人|华人|海归|学霸|学渣|万能|全能)$"
    r"|[人者手家座族控迷党货生员师长工民友粉派型子]$"
)
_AGE = lazy_compile(r"^(?:今年|现在)?(\d{1,3}|[一二两三四五六七八九十]{1,3})(?:周)?岁(?:多|半)?$")
# "我今年35了": a bare number is an age only next to 今年.
_BARE_AGE = lazy_compile(r"^(?:都|已经)?(\d{1,3}|[一二两三四五六七八九十]{2,3})(?:了|啦)?$")
# "上个月刚满27岁", "下个月就满30岁了": the age reached on a birthday, dated by its own time word.
_TURNED = lazy_compile(
    r"^(?P<past>上个?月|上个?(?:星期|周|礼拜)末?|昨天|昨晚|前天|去年|前年"
    r"|[\d一二两三四五六七八九十几]{1,3}个?(?:天|星期|周|月|年)(?:以)?前)?"
    r"(?:刚刚?|才|就|已经|也|马上|快要?|要)*(?:满|过了?|到)(?P<age>\d{1,3}|[一二两三四五六七八九十]{1,3})(?:周)?岁(?:生日)?$"
)
_BIRTH = lazy_compile(r"^(?:是)?((?:19|20)\d{2}|\d{2})年(?:出生|生)?的?(?:人)?$|^出生于((?:19|20)\d{2})年?$")
_GENDER = lazy_compile(r"^(?:可|也)?是(?:一个|个|一名|名)?.{0,3}?(男|女)(?:的|生|性|孩子?|人|子)$")
_MARITAL = lazy_compile(r"^(?:已经)?(结婚|离婚|单身|已婚|未婚|离异)$")
_BIRTHDAY = lazy_compile(r"^(?:是|在)?(?:我的?|的)?(?:生日|生辰)(?:是|在)?$|^(?:过)?生日$|^出生$|^出生的$")
_GRADE = lazy_compile(
    r"^(?:在)?(?:上|读|念)?((?:小学|初中|高中)?[一二三四五六]年级|初[一二三]|高[一二三]|大[一二三四]|研[一二三])$"
)


def valid_zh_name(name: str) -> bool:
    """Whether a word said as a name can be one (no function words, pronouns or rule verbs)."""
    return bool(name) and not (has_cjk(name) and _NOT_IN_NAME.search(name))


def _personal_name(word: str) -> bool:
    """Whether ``我是<word>`` introduces the user: a surname (or 小/老/阿) and a short given name."""
    if not valid_zh_name(word) or _NOT_NAMES.search(word) or _job(word) or _place(word):
        return False
    if word[0] in "小老阿" and len(word) == 2:
        return True
    return (word[:2] in _SURNAMES and len(word) >= 3) or (word[0] in _SURNAMES and len(word) <= 3)


def _name_fact(name: str) -> Fact:
    return Fact(f"用户叫{name}。", "profile", "profile:name", name, single_valued=True, confidence=0.9)


def _identity(c: _Clause, ctx: RuleContext) -> list[Fact] | None:
    b = c.body
    m = _NAME.match(b)
    if m and not c.habit:  # "我经常叫披萨" orders pizza: a name is not said with a frequency
        name = m.group(1).strip()
        return [_name_fact(name)] if valid_zh_name(name) else None
    m = _SELF_IS.match(b)
    if m and c.when is None and _personal_name(m.group(1)):
        return [_name_fact(m.group(1))]
    m = _CALL_ME.match(b)
    if m and (_personal_name(m.group(1)) or not has_cjk(m.group(1))):  # not "叫我起床"
        return [_name_fact(m.group(1).strip())]
    m = _AGE.match(b) or (_BARE_AGE.match(b) if c.when is not None and c.when.period.kind == "year" else None)
    if m and (c.when is None or c.when.period.kind == "year"):
        age = cn_int(m.group(1))
        if age is not None and 3 <= age <= 110:
            year = ctx.today.year - age
            content = f"用户{year}年出生（{ctx.today.year}年时{age}岁）。"
            return [
                Fact(content, "profile", "profile:birth_year", str(year), single_valued=True, confidence=0.85)
            ]
    m = _TURNED.match(b)
    if m:
        when = past_date_zh(m["past"], ctx.today) if m["past"] else None
        age = cn_int(m["age"])
        if (m["past"] and when is None) or age is None or not 3 <= age <= 110:
            return None
        year = when.year if when else c.when.period.start.year if c.when else ctx.today.year
        content = f"用户{year - age}年出生（{year}年满{age}岁）。"
        born = str(year - age)
        return [Fact(content, "profile", "profile:birth_year", born, single_valued=True, confidence=0.85)]
    m = _BIRTH.match(b)
    if m:
        raw = m.group(1) or m.group(2)
        year = int(raw)
        if year < 100:
            year += 2000 if year <= ctx.today.year % 100 else 1900
        if 1900 <= year <= ctx.today.year:
            return [
                Fact(
                    f"用户{year}年出生。",
                    "profile",
                    "profile:birth_year",
                    str(year),
                    single_valued=True,
                    confidence=0.9,
                )
            ]
    m = _GENDER.match(b)
    if m:
        value = "男" if m.group(1) == "男" else "女"
        return [
            Fact(
                f"用户是{value}性。", "profile", "profile:gender", value, single_valued=True, confidence=0.85
            )
        ]
    if c.when is not None and c.when.period.kind == "day" and _BIRTHDAY.match(b):
        day = c.when.period.start
        content = f"用户的生日是{day.month}月{day.day}日。"
        value = f"{day.month:02d}-{day.day:02d}"
        return [Fact(content, "profile", "profile:birthday", value, single_valued=True, confidence=0.85)]
    m = _GRADE.match(b)
    if m:
        grade = m.group(1)
        return [
            Fact(f"用户上{grade}。", "profile", "profile:grade", grade, single_valued=True, confidence=0.75)
        ]
    m = _MARITAL.match(b)
    if m:
        value = {"结婚": "已婚", "离婚": "离异"}.get(m.group(1), m.group(1))
        return [
            Fact(f"用户{value}。", "profile", "profile:marital", value, single_valued=True, confidence=0.8)
        ]
    return None


# ----------------------------------------------------------------- place and work

_WORK_AT = lazy_compile(r"^在(.{2,10}?)(?:做|当|从事|干)(.{2,10}?)(?:工作)?$")
# "在汽车制造厂工作太累了": where the user works, said while complaining about it.
# How long: "在武汉工作三年了", "在杭州住了五年多".
_FOR_SPAN = (
    r"(?:了?(?:快|差不多|将近|好)?(?:\d{1,2}|[一二两三四五六七八九十几]{1,3})多?个?(?:年|月|星期)多?(?:了)?)?"
)
# "是…的" and "现在/一直" around a place: "我是在武汉工作的", "我现在在武汉上班".
_AT_LEAD = r"^(?:是|现在|一直|目前|还|都)*"
_WORK_IN = lazy_compile(
    _AT_LEAD
    + r"在(.{2,10}?)(?:工作|上班|打工|实习)"
    + _FOR_SPAN
    + r"(?:的|(?:(?:真的|实在)?(?:太|很|好|挺|特别|有点|超)(?:累|忙|辛苦|烦)))?$"
)
# "搬到了青岛", "去年从成都搬到青岛来了": where the user moved, also said with where from and when.
_LIVE_IN = lazy_compile(
    rf"^{PAST_TIMES_ZH}?(?:从[{UNIFIED}]{{2,6}}?)?"
    r"(?:住在|住|生活在|定居在|定居|(?:搬家|搬|移居|迁居)(?:到了|到|去了|去|回了|回到了|回到|回|来了|来)(?!这|那))"
    r"(.{2,8}?)(?:来|去)?(?:住|生活|定居)?$"
)
_LIVE_AT = lazy_compile(_AT_LEAD + r"在(.{2,8}?)(?:住|生活|定居)" + _FOR_SPAN + r"的?$")
_HOMETOWN = lazy_compile(r"^(?:是(.{2,6}?)人|来自(.{2,6}?)|老家(?:是|在)(.{2,6}?))$")
# "是护士", "当了厨师", "转行做了程序员", "成了一名律师": a job the user has (now).
_IS_JOB = lazy_compile(
    r"^(?:(?:转行|改行|后来|现在)*(?:当了|做了|成了|成为了?)|(?:后来)?(?:转行|改行)(?:当|做)|是|当)"
    r"(?:一名|一个|一位|个|名|位)?(.{2,10}?)$"
)
_DOES_JOB = lazy_compile(r"^(?:是)?(?:做|干|从事)(.{1,8}?)(?:的|工作|行业|这行)$")
_JOB_IS = lazy_compile(r"^的?(?:工作|职业)是(.{2,10})$")
_SCHOOL = lazy_compile(r"^在(.{2,10}?)(?:上学|读书|读大学|上大学|念书|读研|读博|上高中|上初中)$")


def _city(place: str, *, moved: bool = False) -> Fact:
    verb = "搬到了" if moved else "住在"
    return Fact(f"用户{verb}{place}。", "profile", "profile:city", place, single_valued=True, confidence=0.85)


def _occupation(job: str) -> Fact:
    return Fact(f"用户是{job}。", "profile", "profile:occupation", job, single_valued=True, confidence=0.85)


def _workplace(place: str) -> Fact:
    return Fact(
        f"用户在{place}工作。", "profile", "profile:workplace", place, single_valued=True, confidence=0.75
    )


def _work(c: _Clause, ctx: RuleContext) -> list[Fact] | None:
    b = c.body
    m = _WORK_AT.match(b)
    if m:
        place, job = m.group(1), m.group(2)
        facts: list[Fact] = []
        if _place(place):
            facts.append(
                Fact(
                    f"用户在{place}工作。",
                    "profile",
                    "profile:city",
                    place,
                    single_valued=True,
                    confidence=0.8,
                )
            )
        else:
            facts.append(_workplace(place))
        if _job(job):
            facts.append(_occupation(job))
        return facts
    m = _WORK_IN.match(b)
    if m:
        place = m.group(1)
        if _place(place):
            return [
                Fact(
                    f"用户在{place}工作。",
                    "profile",
                    "profile:city",
                    place,
                    single_valued=True,
                    confidence=0.8,
                )
            ]
        return [_workplace(place)]
    m = _SCHOOL.match(b)
    if m:
        school = m.group(1)
        return [Fact(f"用户在{school}上学。", "profile", "profile:school", school, single_valued=True)]
    m = _LIVE_IN.match(b)
    if m and _place(m.group(1)):
        return [_city(m.group(1), moved="搬" in b[: m.start(1)] or "迁" in b[: m.start(1)])]
    m = _LIVE_AT.match(b)
    if m and _place(m.group(1)):
        return [_city(m.group(1))]
    m = _HOMETOWN.match(b)
    if m:
        place = m.group(1) or m.group(2) or m.group(3)
        if place and _place(place):
            return [
                Fact(
                    f"用户来自{place}。",
                    "profile",
                    "profile:hometown",
                    place,
                    single_valued=True,
                    confidence=0.8,
                )
            ]
    for rx in (_IS_JOB, _JOB_IS):
        m = rx.match(b)
        if m and _job(m.group(1)):
            return [_occupation(m.group(1))]
    m = _DOES_JOB.match(b)
    if m and not m.group(1).startswith(("饭", "菜", "作业", "家务")):
        job = m.group(1)
        return [
            Fact(
                f"用户从事{job}工作。",
                "profile",
                "profile:occupation",
                job,
                single_valued=True,
                confidence=0.75,
            )
        ]
    return None


# ----------------------------------------------------------------- health, food

_ALLERGY = lazy_compile(
    r"^(?:对)?(.{1,10}?)(?:都|也|还)?(不)?过敏(?:症)?$|^有(.{1,8}?)过敏(?:症)?$|^过敏(?:原)?是(.{1,8})$"
)
_ALLERGY_ADV = lazy_compile(
    r"^(?:有点|有些|一点|很|特别|比较|经常|容易|严重|轻微|也|还|都)+|(?:有点|有些|很|特别|比较|严重|也)+$"
)
_NO_EAT = lazy_compile(
    r"^(?:不吃|不能吃|吃不了|不爱吃|不敢吃|不再吃|戒了|忌|不喝|喝不了|不能喝|不再喝)(.{1,8}?)$"
)
_NO_PUT = lazy_compile(
    rf"(?:不|别)(?:放|加|要放|要加)([{UNIFIED}]{{1,4}}?)(?:的(?:一份|一碗|一杯)?([{UNIFIED}]{{1,6}}))?$"
)
_DISH_FIRST = lazy_compile(rf"^吃([{UNIFIED}]{{1,6}}?)(?:的时候)?(?:不|别)")
_DONT_WANT = lazy_compile(r"^(?:不要|别放|不要放|别加)(?:太)?(.{1,4}?)的?$")
# "从2019年开始吃素", "吃素三年了": since when is kept, the diet is the same fact.
_VEGETARIAN = lazy_compile(
    r"^(?:从(?P<since>[^开起]{0,10}?)(?:开始|起)就?)?(?:开始|已经|一直)?(?:吃素|是素食(?:者|主义者)?|只吃素)"
    r"(?:了?(?:已经|有|都)?(?:快|差不多|将近|好)?(?:\d{1,2}|[一二两三四五六七八九十几]{1,3})多?个?(?:年|月)多?)?$"
)
# Working hours and leave bound to a period ("这周上夜班", "下周休年假"): temporary, never a habit.
_SHIFT = lazy_compile(
    r"^(?:在|要|得)?(?:上|值|轮|倒|上了)(?:大?夜班|晚班|早班|白班|中班|班)$"
    r"|^(?:在|要)?(?:休假|休年假|休产假|休病假|请假|放假|居家办公|在家办公|远程办公|隔离)(?:中)?$"
)
_STATE_BODY = lazy_compile(
    r"^(?:身体|胃|肚子|头|嗓子|喉咙|腰|背|腿|膝盖|牙|眼睛|皮肤|肠胃|睡眠|心情|胃口)(?:有点|不太|很|特别)?"
    r"(?:不好|不太好|不舒服|疼|痛|难受|发炎|不行|差)$"
)
#: Lasting conditions: "我有高血压" -> health:高血压.
_CHRONIC = lazy_compile(
    r"^(?:有|患有|得了|是)(?:点|一点儿?|轻微的?)?(高血压|糖尿病|哮喘|胃病|鼻炎|过敏性鼻炎|颈椎病|腰椎间盘突出|贫血|低血糖|"
    r"近视|色盲|色弱|抑郁症|焦虑症|痛风|心脏病|乳糖不耐受?)$"
)
_ACUTE = lazy_compile(
    r"^(?:在)?(?:感冒|发烧|咳嗽|失眠|生病|住院|怀孕|减肥|备孕|备考|戒烟|戒酒|找工作|考研|加班|(?:很|比较|特别)忙|压力(?:很|比较|特别)?大)$"
)
_TRYING = lazy_compile(r"^(?:在|正在)?(?:试着|尝试|试试|努力)(.{2,15})$")
# An activity in progress: "在学吉他", "开始练习跑步". Learning is a state even without a time word;
# anything else only with one ("最近在看三体"): a bare "在看电视" is what the user does right now.
_ONGOING = lazy_compile(
    r"^(?P<aspect>在|正在|(?:又|重新)?开始(?:在)?)"
    r"(?P<act>(?P<verb>学习|学|练习|练|自学|复习|准备|备战|研究|筹备|装修|调理|适应|找|看|读|写|做|忙|追|养|带|玩|跑)"
    r"(?P<obj>.{1,14}))$"
)
_LEARNING = ("学习", "学", "练习", "练", "自学", "复习", "准备", "备战")
# "在学校" is a place, "在做饭" a moment.
_ONGOING_BAD = lazy_compile(r"^学(?:校|院|堂|生|期)|^练(?:习室|车场)|你|吗$|什么|怎么|(?<![吉其])[他她它]")
#: Time words that name a period ("最近", "这周"), not just the present moment ("目前").
_PERIOD_TEMP = (
    "最近",
    "近期",
    "近来",
    "这几天",
    "这些天",
    "这段时间",
    "这段日子",
    "这阵子",
    "这一阵",
    *_THIS_WEEK,
)


def _food(item: str, ctx: RuleContext, c: _Clause, *, verb: str = "不吃", confidence: float = 0.8) -> Fact:
    item = _third(item)
    transient = bool(c.temp)
    content = f"用户{c.temp}{verb}{item}。"
    # Not drinking alcohol is the habit 戒酒 gives up (``habit:喝酒``), so the two supersede each other.
    drink = item == "酒" and "喝" in verb
    key, category, value = (
        ("habit:喝酒", "habit", "喝酒") if drink else (f"food:{norm_key(item)}", "diet", item)
    )
    return Fact(
        content,
        category,
        key,
        value,
        polarity=-1,
        transient=transient,
        expires_at=ctx.ttl_expiry() if transient else None,
        confidence=confidence,
    )


def _health_food(c: _Clause, ctx: RuleContext) -> list[Fact] | None:
    b = c.body
    m = _ALLERGY.match(b)
    if m:
        item = _ALLERGY_ADV.sub("", m.group(1) or m.group(3) or m.group(4) or "")
        if item and len(item) <= 8 and "你" not in item:
            neg = bool(m.group(2))
            content = f"用户对{_third(item)}{'不' if neg else ''}过敏。"
            return [
                Fact(
                    content,
                    "health",
                    f"allergy:{norm_key(item)}",
                    item,
                    polarity=-1 if neg else 1,
                    confidence=0.9,
                )
            ]
    m = _VEGETARIAN.match(b)
    if m:
        since = m["since"]
        if since is not None and not since and c.when is not None and c.when.period.kind == "year":
            since = f"{c.when.period.start.year}年"  # "从今年开始吃素": 今年 was read as the clause's time
        if since:
            past = past_date_zh(since, ctx.today)
            since = f"{past.year}年" if past and since.endswith("年") else since
        content = f"用户从{since}开始吃素。" if since else "用户吃素。"
        return [Fact(content, "diet", "food:素食", "素食", confidence=0.85)]
    if _SHIFT.match(b) and (c.temp or (c.when is not None and c.when.period.end >= ctx.today)):
        fact = _state(b, ctx, c)
        if c.when is not None and not c.temp:
            fact.content = f"用户{render_zh(c.when.period)}{_third(b)}。"
        if c.when is not None:
            fact.expires_at = ctx.period_expiry(c.when.period)
        return [fact]
    m = _NO_EAT.match(b)
    if m:
        verb = b[: m.start(1)]
        return [_food(m.group(1), ctx, c, verb=verb)]
    m = _NO_PUT.search(b)
    if m and m.group(1) in ZH_FOODS:
        item, dish = m.group(1), m.group(2)
        first = _DISH_FIRST.match(b)
        if dish is None and first:  # "吃面别放香菜"
            dish = first.group(1)
        if dish and not c.temp:
            return [
                Fact(f"用户吃{dish}不放{item}。", "diet", f"food:{item}", item, polarity=-1, confidence=0.8)
            ]
        return [_food(item, ctx, c)]
    m = _DONT_WANT.match(b)
    if m and m.group(1) in ZH_FOODS:
        return [_food(m.group(1), ctx, c, confidence=0.65)]
    if _STATE_BODY.match(b):
        if c.temp:
            return [_state(b, ctx, c)]
        # Said of a day ("今天心情不太好", "昨天胃不舒服") or a mood at all: how the user is then,
        # never a lasting condition.
        if c.when is not None or b.startswith("心情"):
            fact = _state(b, ctx, c)
            if c.when is not None:
                fact.content = f"用户{render_zh(c.when.period)}{_third(b)}。"
                fact.expires_at = ctx.period_expiry(c.when.period)
            return [fact]
        return [Fact(f"用户{b}。", "health", f"health:{norm_key(b)}", b, polarity=-1, confidence=0.7)]
    if _ACUTE.match(b) and not c.habit:  # "经常加班", "每天失眠" are habits, not this week's state
        return [_state(b, ctx, c)]
    m = _CHRONIC.match(b)
    if m:
        return [Fact(f"用户有{m.group(1)}。", "health", f"health:{m.group(1)}", m.group(1), confidence=0.8)]
    m = _TRYING.match(b)
    if m and "你" not in b:
        item = _third(m.group(1))
        return [
            Fact(
                f"用户{c.temp}在尝试{item}。",
                "state",
                f"state:{norm_key(item)}",
                item,
                transient=True,
                expires_at=ctx.ttl_expiry(),
                confidence=0.7,
            )
        ]
    return _ongoing(c, ctx)


def _ongoing(c: _Clause, ctx: RuleContext) -> list[Fact] | None:
    """``最近在学吉他`` / ``我开始练习跑步了``: a transient state, never a momentary action."""
    m = _ONGOING.match(c.body)
    if m is None or _ONGOING_BAD.search(m["act"]) or c.when is not None and c.when.period.kind == "day":
        return None
    if m["verb"] not in _LEARNING and c.temp not in _PERIOD_TEMP:
        return None
    aspect = "在" if m["aspect"] in ("在", "正在") else m["aspect"].removesuffix("在")
    act = _third(m["act"])
    content = f"用户{c.temp}{aspect}{act}{'了' if aspect.endswith('开始') else ''}。"
    return [
        Fact(
            content,
            "state",
            f"state:{norm_key(m['act'])}",
            act,
            transient=True,
            expires_at=ctx.ttl_expiry(),
            confidence=0.7,
        )
    ]


_EVENT_STATE = lazy_compile(r"^(?:感冒|发烧|咳嗽|失眠|生病|住院|怀孕)$")


def _state(body: str, ctx: RuleContext, c: _Clause) -> Fact:
    done = "了" if c.done and _EVENT_STATE.match(body) else ""
    return Fact(
        f"用户{c.temp}{_third(body)}{done}。",
        "state",
        f"state:{norm_key(body)}",
        body,
        polarity=-1 if "不" in body else 1,
        transient=True,
        expires_at=ctx.ttl_expiry(),
        confidence=0.7,
    )


# ----------------------------------------------------------------- pets, family

_PET_VERBS = alternation(PET_VERBS_ZH)
_QTY = r"(?P<q>(?:一|两|三|四|几|\d+)(?:只|条|个|头|匹|对)?|只|条|头|匹)?"
_PET = lazy_compile(
    rf"^(?:家里?)?(?:有|{_PET_VERBS}){_QTY}(?:叫(?P<n1>[^的，]{{1,6}})的)?(?P<adj>[{UNIFIED}]{{1,3}}的)?(?P<sp>[{UNIFIED}]{{1,6}}?)"
    r"(?:(?:叫|名叫|名字叫)(?P<n2>.{1,6}))?$"
)
_PET_NAMED = lazy_compile(
    rf"^(?:的|家(?:里)?(?:的|那|这)?(?:只|条|头)?|(?:那|这)(?:只|条|头)|给(?:我的|我家的?|自己的)?)(?P<sp>[{UNIFIED}]{{1,6}}?)(?:叫|名叫|名字叫|的名字是|起名叫|起名字叫|取名叫|起了个名字叫)"
    r"(?P<n>.{1,6})$"
)
_FAMILY_HAS = lazy_compile(rf"^有(?P<q>(?:一|两|三|四|五|\d+)个?)?(?P<rel>{ZH_RELATIONS})$")
# A clause about a relative: "我妈妈喜欢跳舞" (the 我 already stripped), "女儿今年上小学".
_RELATIVE = lazy_compile(rf"^的?(?P<rel>{ZH_RELATIONS})(?P<pred>.*)$")
# Someone else the user knows: nothing said about them is about the user.
_ACQUAINTANCE = lazy_compile(
    r"^的?(?:好朋友|朋友|同事|同学|室友|舍友|老板|领导|上司|老师|邻居|闺蜜|哥们|兄弟|网友|客户|前妻|前夫|前任|家人|亲戚)"
)
# Who a relative is and where they live, also said with an adverb ("岳母也住在西安", "舅舅一直住在老家").
_REL_IDENTITY = lazy_compile(
    r"^(?:也|还(?!是)|(?:还是|依然|仍然|依旧)(?=住|在|生活|定居)|都|一直|现在|目前|以前|原来|曾经|之前)*(?:要(?!是)|会(?!是)|将|打算|准备|刚|刚刚|已经)?(?:是|叫|住在|也是|也在|(?:要|打算|准备)?(?:去|来|到).{1,8}?(?:留学|读书|上学|上大学|工作|定居|实习)|(?:上|读)(?:小学|初中|高中|大学|幼儿园|研究生|博士)|(?:考上了?|考进了?|被.{1,8}录取).{2,10}|(?:在.{1,8}?)?开了(?:一)?[家个间]|搬到|搬去|在.{1,10}?(?:工作|上班|上学|读书|读大学|上大学|读研|住|生活)(?:了.{1,6})?$).{0,20}$"
)
_REL_IN_PLACE = lazy_compile(rf"^(?:一家)?(?:都|也|还|一直)*在(?P<place>[{UNIFIED}]{{2,6}})$")
# "姐姐在上海当中学老师", "哥哥做程序员": a relative's job (and where), checked against the job words.
_REL_JOB = lazy_compile(
    r"^(?:也|还|现在|一直)*(?:在(?P<place>.{1,10}?))?(?:当|做|干|从事)(?:一名|一个|一位|个|名)?(?P<job>.{2,10})$"
)
# "哥哥小杰在深圳读大学": a relative named before what is said about them.
_REL_NAMED = lazy_compile(rf"^(?P<name>[{UNIFIED}]{{2,3}}?)(?=在|是|住|今年|也|刚|已经|现在)")
_REL_AGE = lazy_compile(r"^(\d{1,3}|[一二两三四五六七八九十]{1,3})(?:周)?岁(?:多|半)?$")
# "外婆八十多了", "爷爷都九十了": an age in tens said without 岁 or a year word is still an age
# (tens only: "弟弟三了" is no way to say it, and a bare small number is something else).
_REL_AGE_TENS = lazy_compile(
    r"^(?:都|已经|快|今年|也|都已经)?(?P<n>[1-9]\d|[二三四五六七八九]?十[一二三四五六七八九]?)(?P<more>多|来)?岁?$"
)
# Said of parents, having one is no news; of anyone else, "我小叔子下周要回来" says the user has one.
_REL_EVERYONE_HAS = frozenset({"父亲", "母亲", "父母"})
_REL_ADV = r"(?:也|还|都|很|特别|非常|最|超级|超|比较|挺|一直|从小就?|就)*"
_REL_LIKE = lazy_compile(
    rf"^{_REL_ADV}(?:不太|不怎么|不)?(?:喜欢|爱吃|爱喝|爱|热爱|讨厌|害怕|怕|迷上了|不吃|不能吃|吃不了|不喝)"
    r"(?P<obj>.{1,15})$"
)
_REL_ALLERGY = lazy_compile(rf"^{_REL_ADV}(?:对)?(?P<obj>.{{1,8}}?)(?:都|也|还)?(?:不)?过敏$")
_REL_SPOKEN = {"妈": "妈妈", "爸": "爸爸", "哥": "哥哥", "姐": "姐姐", "弟": "弟弟", "妹": "妹妹"}
_REL_STATE = lazy_compile(r"^(?:在)?(?:生病|住院|感冒|发烧|咳嗽|怀孕|出差|备考|考研|找工作)$")


def _relative(rel: str, pred: str, c: _Clause, ctx: RuleContext) -> list[Fact] | None:
    """A fact about the user's relative ``rel`` ("妈妈"): never a fact about the user.

    Keys: ``family:<relation>`` for who they are (job, name, where they live), and
    ``family:<relation>:<subject>`` for anything else about them (likes, allergies, age).
    """
    pred = _strip_trail(pred)
    if not pred or _BAD_OBJECT.search(pred):
        return None
    canon = zh_relation(rel)
    rel = _REL_SPOKEN.get(rel, rel)
    named = _REL_NAMED.match(pred)
    if named and _personal_name(named["name"]):
        # Who they are, under their name: two brothers stay two people.
        name, rest = named["name"], pred[named.end() :]
        if _REL_IDENTITY.match(rest) or _REL_JOB.match(rest):
            content = f"用户的{rel}{name}{_third(rest)}。"
            return [Fact(content, "relation", f"family:{canon}:{norm_key(name)}", name, confidence=0.7)]
    job = _REL_JOB.match(pred)
    located = _REL_IN_PLACE.match(pred)
    if located and _place(located["place"]):  # "姑姑一家都在济南" (not "妈妈在厨房")
        return [Fact(f"用户的{rel}{_third(pred)}。", "relation", f"family:{canon}", rel, confidence=0.7)]
    if _REL_IDENTITY.match(pred) or (job and _job(job["job"])):
        return [Fact(f"用户的{rel}{_third(pred)}。", "relation", f"family:{canon}", rel, confidence=0.7)]
    m = _REL_AGE.match(pred)
    if m and c.when is not None and c.when.period.kind == "year":
        content = f"用户的{rel}{ctx.today.year}年时{pred}。"
        return [Fact(content, "relation", f"family:{canon}:age", pred, single_valued=True, confidence=0.75)]
    m = _REL_AGE_TENS.match(pred)
    if m:
        said = f"{m['n']}{m['more'] or ''}岁"
        content = f"用户的{rel}{ctx.today.year}年时{said}。"
        return [Fact(content, "relation", f"family:{canon}:age", said, single_valued=True, confidence=0.7)]
    m = _REL_LIKE.match(pred) or _REL_ALLERGY.match(pred)
    if m:
        obj = m["obj"]
        subject = obj[1:] if obj[0] in "吃喝" and len(obj) > 1 else obj
        content = f"用户的{rel}{_third(pred)}。"
        return [Fact(content, "relation", f"family:{canon}:{norm_key(subject)}", subject, confidence=0.7)]
    if _REL_STATE.match(pred):
        done = "了" if c.done else ""
        content = f"用户的{rel}{c.temp}{pred}{done}。"
        fact = Fact(content, "relation", f"family:{canon}:{norm_key(pred.removeprefix('在'))}", pred)
        fact.transient, fact.expires_at, fact.confidence = True, ctx.ttl_expiry(), 0.65
        return [fact]
    return None


def _has_relative(rel: str) -> list[Fact] | None:
    """What any clause about a named relation says at least: that the user has them.

    "我小叔子下周要从美国回来" says nothing the relative rules read, but it does say the user
    has a 小叔子; of parents that is no news (see ``_REL_EVERYONE_HAS``).
    """
    canon = zh_relation(rel)
    if canon in _REL_EVERYONE_HAS:
        return None
    said = _REL_SPOKEN.get(rel, rel)
    return [Fact(f"用户有{said}。", "relation", f"family:{canon}", said, confidence=0.6)]


# When and where a pet was got ("去年领养了", "前两天在楼下捡到"): the pet is had all the same.
# Past times are not read by the date finder (it resolves what is planned), so they are cut here.
_PAST_WHEN = PAST_TIMES_ZH
_TWO_PETS = lazy_compile(
    rf"^(?P<verb>(?:家里?)?(?:有|{_PET_VERBS}))(?P<first>[一两三四几\d]?[只条个头][{UNIFIED}]{{1,6}}?)和"
    rf"(?P<second>[一两三四几\d]?[只条个头][{UNIFIED}]{{1,6}})$"
)
# "养过一只狗": a pet the user had once, maybe not any more.
_HAD_ONCE = lazy_compile(r"^(?:家里?)?(?:有|养|领养|收养|捡)过")
_PET_WHEN = lazy_compile(
    rf"^(?:家里?)?{_PAST_WHEN}*(?:(?:在|从)[{UNIFIED}]{{1,8}}?(?=(?:家里?)?(?:{_PET_VERBS})))?"
)


# "从朋友那儿接手了一只布偶猫": any verb that brings a pet home, read only when the sentence goes on
# to name it ("…，给它取名叫雪球"): naming a pet is what its owner does, so the verb need not be
# one of ``PET_VERBS_ZH`` (a cat seen or fed is never named).
_GOT_ANY_VERB = lazy_compile(
    rf"(?:[{UNIFIED}]{{1,2}})了(?P<q>(?:一|两|三|几|\d+)?(?:只|条|头))(?P<sp>[{UNIFIED}]{{1,6}})$"
)
# A later clause that gives a name: "给它取名叫雪球", "起名叫棉花", "取名七七".
_NAMES_IT = lazy_compile(r"^(?:我|我们)?(?:给(?:它|他|她|它们|他们)|就)?(?:取|起)(?:了个?)?名字?(?:叫|为)?")


def _pets_family(c: _Clause, ctx: RuleContext) -> list[Fact] | None:
    b = _PET_WHEN.sub("", c.body) or c.body
    got = _GOT_ANY_VERB.search(b) if ctx.naming_next else None
    if got and ZH_SPECIES_RE.match(got["sp"]) and not _PET.match(b):
        b = f"养了{got['q']}{got['sp']}"
    if _HAD_ONCE.match(b):
        return None
    both = _TWO_PETS.match(b)
    if both:  # "养了一只柯基和一只橘猫": each pet on its own
        facts = [
            f
            for part in (both["first"], both["second"])
            for f in (_pets_family(replace(c, body=both["verb"] + part), ctx) or ())
        ]
        return facts or None
    m = _PET.match(b)
    if m and ZH_SPECIES_RE.match(m["sp"]):
        species, name, adj = m["sp"], m["n1"] or m["n2"], m["adj"] or ""
        q = m["q"] or "一只"
        if q[-1] not in "只条个头匹对":
            q += "只"
        elif len(q) == 1:  # "有只阿拉斯加": one, its measure word said alone
            q = "一" + q
        if name:
            ctx.pets[name] = species
            content = f"用户养了{q}叫{name}的{adj}{species}。"
            return [Fact(content, "relation", f"pet:{norm_key(name)}", species, confidence=0.85)]
        ctx.pets.setdefault(species, species)
        return [
            Fact(
                f"用户养了{q}{adj}{species}。",
                "relation",
                f"pet:{norm_key(species)}",
                species,
                confidence=0.8,
            )
        ]
    m = _PET_NAMED.match(b)
    if m and ZH_SPECIES_RE.match(m["sp"]):
        ctx.pets[m["n"]] = m["sp"]
        content = f"用户的{m['sp']}叫{m['n']}。"
        return [Fact(content, "relation", f"pet:{norm_key(m['n'])}", m["sp"], confidence=0.85)]
    m = _FAMILY_HAS.match(b)
    if m:
        rel = m["rel"]
        q = m["q"] or ""  # "我有孩子" says no number: none is added
        if q and not q.endswith("个"):
            q += "个"
        return [Fact(f"用户有{q}{rel}。", "relation", f"family:{zh_relation(rel)}", rel, confidence=0.8)]
    return None


def _pet_age(text: str, ctx: RuleContext) -> list[Fact] | None:
    """``年糕两岁了`` / ``我的猫三个月大了`` about a pet already known."""
    if not ctx.pets:
        return None
    t = re.sub(r"^我(?:的|家的?)", "", text)
    for name, species in ctx.pets.items():
        if not t.startswith(name):
            continue
        m = re.match(
            r"^(?:今年|已经|现在|都)?(\d{1,2}|[一二两三四五六七八九十]{1,3})(岁|个月)(?:多|半)?(?:大)?(?:了|啦)?$",
            t[len(name) :],
        )
        if not m:
            continue
        n = cn_int(m.group(1))
        if n is None:
            return None
        said = m.group(1) + m.group(2)
        label = f"{species}{name}" if species and species != name else name
        content = f"用户的{label}{said}了（{ctx.today.year}年{ctx.today.month}月）。"
        key = f"pet:{norm_key(name)}:age"
        return [Fact(content, "relation", key, f"{n}{m.group(2)}", single_valued=True, confidence=0.8)]
    return None


# ----------------------------------------------------------------- likes, habits

_DISLIKE = lazy_compile(r"^(?:不太|不怎么|不是很|不是特别|不大|不|没那么|并不)(喜欢|爱)(.{1,20})$")
_HATE = lazy_compile(r"^(?:很|特别|非常|最|超|有点|比较)?(讨厌|受不了|反感|厌恶|害怕|怕)(.{1,20})$")
_LIKE = lazy_compile(
    r"^(?:(?:特别|很|非常|最|超级|超|挺|比较|也|还|都|一直|真的|蛮|可|更|尤其|好|还挺|最近)+)?"
    r"(喜欢上了|喜欢|爱上了|热爱|钟爱|偏爱|迷上了|爱)(.{1,20})$"
)
_FAVORITE = lazy_compile(r"^(?:最|特别)?(?:喜欢|爱)的(.{1,6}?)(?:是|就是)(.{1,12})$")
_LIST_ZH = lazy_compile(r"、|(?:和|与|跟|还有)(?=[^、]*$)")
_INTEREST = lazy_compile(r"^对(.{1,10}?)(?:很|特别|非常|比较|挺)?感兴趣$|^的?(?:爱好|兴趣)是(.{1,20})$")
_BAD_OBJECT = lazy_compile(r"你|您|的时候|什么|哪|怎么|吗$|^(?:这|那|它|他|她|我|自己)")
# Not a thing at all: a bare verb ("喜欢吃"), a character repeated, or a phrase that opens or ends
# on a grammar word ("喜欢了是", "喜欢有喜吃在") - what noise and cut-off speech look like.
_JUNK_OBJECT = lazy_compile(
    r"^[吃喝玩看听做去买学用写读唱跳说叫弄搞]$|(.)\1\1|^[的了是叫吗呢吧啊么也都就还很太没]|[是在有叫和跟与也都就还很太没不每]$"
)


def _pref(obj: str, verb: str, polarity: int, c: _Clause) -> Fact | None:
    obj = _strip_trail(obj).removesuffix("的")
    if not obj or _BAD_OBJECT.search(obj) or _JUNK_OBJECT.search(obj) or len(obj) > 20:
        return None
    item = obj
    food = False
    if obj[0] in "吃喝" and len(obj) > 1:
        item, food = obj[1:], True
        if _JUNK_OBJECT.search(item):
            return None
    elif obj in ZH_FOODS:
        food = True
    content = f"用户{c.habit}{verb}{_third(obj)}。"
    if obj == "喝酒":  # drinking alcohol is one habit whether liked, quit or avoided (see ``_food``)
        return Fact(content, "habit", "habit:喝酒", "喝酒", polarity=polarity, confidence=0.8)
    if food:
        return Fact(content, "diet", f"food:{norm_key(item)}", item, polarity=polarity, confidence=0.8)
    return Fact(content, "preference", f"pref:{norm_key(item)}", item, polarity=polarity, confidence=0.8)


# A pronoun is someone else's habit ("他每天…") unless it is the object of taking someone along
# ("每天带它去跑步": the user walks the dog).
_HABIT_BODY_BAD = lazy_compile(
    r"^(?:很|好|太|挺|有点|比较|特别|非常|是|觉得|感觉|想|要|会|都很|在等)|了|不|没|可能|因为|希望|现在|"
    r"(?<![吉其带陪跟和同给喂遛])[他她它]|着$"
)
_LOCATION_PREFIX = lazy_compile(
    rf"^(?:在|去)[{UNIFIED}]{{1,10}}(?:边|旁|附近|里|上|下)|^(?:在|去)(?:公园|健身房|家)"
)
_COMPANION = lazy_compile(r"^(?:带|陪|跟|和|同|给|喂|遛)(?:它们|他们|她们|它|他|她)(?:一起)?")
_ACTIVITY = (
    "跑步|慢跑|晨跑|夜跑|散步|遛弯|遛狗|游泳|爬山|徒步|骑车|骑行|打球|打篮球|打羽毛球|打乒乓球|踢球|踢足球|健身|锻炼|"
    "瑜伽|钓鱼|练琴|看书|读书|喝茶|喝咖啡|玩"
)
_GO_TO_DO = lazy_compile(rf"^(?:(?:去|到|在)[{UNIFIED}]{{1,10}}?|[{UNIFIED}]{{2,10}}?)(?=(?:{_ACTIVITY})$)")
_CLOCK = lazy_compile(
    r"(?:早上|早晨|上午|中午|下午|傍晚|晚上|凌晨)?(?:(?:\d{1,2}|[一二两三四五六七八九十]{1,3})(?:点|:|：)"
    r"(?:半|一刻|三刻|\d{1,2}分?|[一二三四五六七八九十]{1,3}分?)?(?:左右|前|后|多)?)?"
)


def _habit_activity(body: str) -> str:
    """The activity of a habit, for its key: "带它去东湖绿道跑步" -> "跑步"."""
    body = _COMPANION.sub("", body)
    return _GO_TO_DO.sub("", body) if _GO_TO_DO.match(body) else _LOCATION_PREFIX.sub("", body) or body


def _resolve_pet(body: str, ctx: RuleContext) -> str:
    """Name the pet in "带它去跑步" when one is known (the last one mentioned): "带年糕去跑步"."""
    if not ctx.pets or not re.search(r"(?<=[带陪跟和同给喂遛])它(?!们)", body):
        return body
    name, species = list(ctx.pets.items())[-1]
    label = name if name != species else f"自己的{species}"
    return re.sub(r"(?<=[带陪跟和同给喂遛])它(?!们)", label, body, count=1)


_PLACE_WORD = lazy_compile(
    r"(?:乐园|公园|图书馆|健身房|超市|市场|商场|博物馆|教堂|寺|庙|海边|山上|老家|学校|医院|酒吧|咖啡馆|书店|游泳馆)$"
)


def _place_like(text: str) -> bool:
    """Whether a habit's object after 去 is where the user goes (a place word or a known place name)."""
    return _PLACE_WORD.search(text) is not None or _place(text)


def _likes_habits(c: _Clause, ctx: RuleContext) -> list[Fact] | None:
    b = c.body
    m = _DISLIKE.match(b)
    if m:
        fact = _pref(m.group(2), "不" + m.group(1), -1, c)
        return [fact] if fact else None
    m = _HATE.match(b)
    if m:
        fact = _pref(m.group(2), m.group(1), -1, c)
        return [fact] if fact else None
    m = _FAVORITE.match(b)
    if m and not _BAD_OBJECT.search(m.group(2)) and not _JUNK_OBJECT.search(m.group(2)):
        thing, value = m.group(1), _third(m.group(2))
        content = f"用户最喜欢的{thing}是{value}。"
        key = f"pref:最喜欢的{norm_key(thing)}"
        return [Fact(content, "preference", key, value, single_valued=True)]
    m = _LIKE.match(b)
    if m and not m.group(2).startswith("的"):
        verb = "喜欢" if m.group(1).startswith("喜欢上") else m.group(1).removesuffix("了")
        items = _LIST_ZH.split(m.group(2)) if "、" in m.group(2) else [m.group(2)]
        facts = [f for f in (_pref(i, verb, 1, c) for i in items if i) if f is not None]
        return facts or None
    m = _INTEREST.match(b)
    if m:
        obj = m.group(1) or m.group(2)
        fact = _pref(obj, "喜欢", 1, c)
        if fact:
            fact.content = f"用户对{_third(obj)}感兴趣。" if m.group(1) else f"用户的爱好是{_third(obj)}。"
            return [fact]
        return None
    if c.habit:
        body = _ADVERBS.sub("", re.sub(r"^(?:都|会|要|去|常|总|就|也|得|该)+(?=.)", "", b))
        # "每年都去迪斯尼乐园": going to a place is the habit, 去 stays ("去跑步" is 跑步).
        went = re.match(r"^(?:都|会|要|常|总|就|也|得|该)*去(?P<where>.+)$", b)
        if went and _place_like(went["where"]):
            body = "去" + went["where"]
        if (
            2 <= len(body) <= 20
            and not _HABIT_BODY_BAD.search(body)
            and not _BAD_OBJECT.search(_COMPANION.sub("", body) or body)
            and not _JUNK_OBJECT.search(body)
        ):
            activity = _habit_activity(body)
            return [
                Fact(
                    f"用户{c.habit}{_third(_resolve_pet(body, ctx))}。",
                    "habit",
                    f"habit:{norm_key(activity)}",
                    activity,
                    confidence=0.7,
                )
            ]
    return None


# ----------------------------------------------------------------- plans

_MODAL = lazy_compile(
    r"^(正打算|正准备|打算|准备|计划|将要|想要|要|想|将|会|得)(?![着过])(?:还|也|再|都)?(.+)$"
)
_STRONG_MODALS = ("正打算", "正准备", "打算", "准备", "计划")
#: Long-term goals worth remembering even without a date ("我想学吉他", "我要减肥").
_GOAL = lazy_compile(
    r"^(?:减肥|瘦身|戒烟|戒酒|健身|考研|考公|考证|找工作|换工作|辞职|创业|出国|留学|存钱|买房|结婚|早睡|早起|学.{1,6}|成为.{1,8})$"
)
_GO = lazy_compile(r"^(?:去|回|飞|出发去|到)(.+)$")
#: Eating or drinking something soon: a craving, not a plan.
_CRAVING = lazy_compile(r"^(?:吃|喝|点外卖|叫外卖|点个外卖|来一?[杯碗份顿])")
_PLAN_BAD = lazy_compile(r"你|您|吗$|什么|怎么|(?<![吉其])[他她它]")


# "报名了下个月的杭州马拉松": signing up for a dated event is a plan for that date.
_SIGNED_UP = lazy_compile(
    r"^(?:已经|刚刚?|也)*(?:报名参加了?|报名了?|报了名?|报考了?|注册了|预约了|订了|买了)(?:参加了?)?的?"
    r"(?P<thing>.{2,20}?)(?P<ticket>的?(?:门票|票|机票|车票|名额|号))?$"
)


def _signed_up(c: _Clause, ctx: RuleContext) -> list[Fact] | None:
    m = _SIGNED_UP.match(c.body)
    if m is None or c.when is None or c.when.period.end <= ctx.today or _PLAN_BAD.search(m["thing"]):
        return None
    verb = c.body[: m.start("thing")].removesuffix("的")
    if verb.endswith(("订了", "买了")) and not m["ticket"]:
        return None  # "买了下周的菜" is shopping, a ticket is a plan
    thing = _third(m["thing"])
    if m["ticket"]:
        content = f"用户{verb}{thing}的{m['ticket'].removeprefix('的')}（{render_zh(c.when.period)}）。"
    else:
        content = f"用户{verb}{render_zh(c.when.period)}的{thing}。"
    key = f"plan:{norm_key(m['thing'])}"
    ctx.add_plan(key, m["thing"], "计划")
    expires = ctx.period_expiry(c.when.period)
    return [Fact(content, "plan", key, m["thing"], transient=True, expires_at=expires, confidence=0.75)]


def _plans(c: _Clause, ctx: RuleContext) -> list[Fact] | None:
    b = c.body
    signed = _signed_up(c, ctx)
    if signed:
        return signed
    m = _MODAL.match(b)
    modal, action = (m.group(1), m.group(2)) if m else ("", "")
    if not m:
        g = _GO.match(b)
        if g and c.when is not None and not c.done:
            modal, action = "计划", b
    if not action or _PLAN_BAD.search(action) or len(action) > 24:
        return None
    if c.when is None and modal in ("要", "想", "想要") and _GOAL.match(action):
        action = _third(action)
        content = f"用户{'想' if modal != '要' else '要'}{action}。"
        return [Fact(content, "goal", f"goal:{norm_key(action)}", action, confidence=0.65)]
    if c.when is not None and c.when.period.end <= ctx.today:
        return None  # today's errands and wants ("今晚想吃点水果") are momentary, not memory
    if modal not in _STRONG_MODALS and (c.when is None or _CRAVING.match(action)):
        return None  # a dated craving ("明天想吃火锅") is not a plan either
    action = _third(action)
    verb = "想" if modal in ("想", "想要") else "计划"
    if c.when is not None:
        content = f"用户{verb}{render_zh(c.when.period)}{action}。"
        expires = ctx.period_expiry(c.when.period)
    else:
        content = f"用户{verb}{action}。"
        expires = ctx.ttl_expiry()
    key = f"plan:{norm_key(action)}"
    ctx.add_plan(key, action, verb)
    return [Fact(content, "plan", key, action, transient=True, expires_at=expires, confidence=0.75)]


_FOLLOW_TOPIC = lazy_compile(r"^(.{1,6}?)(?:的时间|的日期|时间|日期)?(?:是|在|定在|安排在|定于|从)?$")


def _plan_date(text: str, ctx: RuleContext) -> list[Fact] | None:
    """``出差是2月10号到14号``: a date for a plan mentioned before."""
    if not ctx.plans:
        return None
    when = find_zh(text, ctx.today)
    if when is None or len(text) - when.end > 4:
        return None
    m = _FOLLOW_TOPIC.match(text[: when.start].strip())
    if not m:
        return None
    plan = ctx.find_plan(m.group(1))
    if plan is None:
        return None
    content = f"用户{plan.modal}{render_zh(when.period)}{plan.action}。"
    expires = ctx.period_expiry(when.period)
    return [Fact(content, "plan", plan.key, plan.action, transient=True, expires_at=expires, confidence=0.75)]


_RULES: Sequence[Rule] = (_identity, _work, _health_food, _pets_family, _likes_habits, _plans)


# Verbs of liking: a time is said before them, so a date word right after them is part
# of what is liked or heard (a band, a title, a season), not when.
_OBJECT_VERB_BEFORE = lazy_compile(r"(?:喜欢|爱|迷|粉|讨厌|迷上了?|喜欢上了?|爱上了?)(?:听|看|唱|追)?$")
_OUR_HOME_HAS = lazy_compile(rf"^我们家(?:里)?(?:{_PAST_WHEN})*(?:新)?(?:有|{_PET_VERBS})")
_TIME_BEFORE_ME = lazy_compile(rf"^({_PAST_WHEN}+)我(?!们)")


def _prepare(text: str, ctx: RuleContext) -> tuple[_Clause, str] | None:
    """Strip fillers and markers; return the clause and its subject: ``user``, ``other`` or ``""``."""
    text = _FILLERS.sub("", _MEMO_PREFIX.sub("", text))
    if not text or _REQUEST.search(text):
        return None
    habit = ""
    hm = _HABIT.search(text)
    # Only a frequency word opening the clause ("我平时…", "最近每天…") marks a habit; a time of
    # the week or day may come first ("我周末经常去爬山", "我下班后一般去健身") and stays with it.
    lead = _TEMP.sub("", text[: hm.start()]).lstrip("我也还就都") if hm else ""
    when_lead = _HABIT_WHEN.fullmatch(lead) if hm and lead else None
    if hm and (not lead or when_lead):
        clock = _CLOCK.match(text, hm.end())  # the clock time said with it: "每天早上6点"
        end = clock.end() if clock else hm.end()
        habit = (when_lead[1] if when_lead else "") + text[hm.start() : end]
        start = hm.start() - len(lead) if when_lead else hm.start()
        text = text[:start] + text[end:]
    temp = ""
    tm = _TEMP.search(text)
    if tm:
        temp = tm.group(0)
        text = _TEMP.sub("", text)
    when = find_zh(text, ctx.today)
    if when is not None and _OBJECT_VERB_BEFORE.search(text[: when.start]):
        when = None  # "喜欢五月天", "爱听三月的歌": a date word right after the verb is in its object
    if when is not None:
        said = text[when.start : when.end]
        if said in _THIS_WEEK and not temp:
            temp = said
        text = text[: when.start] + text[when.end :]
    text = _FILLERS.sub("", text.strip("，, "))
    # "上个月我捡了一只猫": a past time before the subject; the subject still opens the clause.
    before = _TIME_BEFORE_ME.match(text)
    if before:
        text = "我" + before[1] + text[before.end() :]
    # "我们家收养了一条狗": the household's pet is the user's; "我们家" is read as "我家".
    if _OUR_HOME_HAS.match(text):
        text = "我家" + text[3:]
    subject = ""
    if text.startswith("我") and not text.startswith("我们"):
        subject = "user"
        text = text[1:].removeprefix("自己")  # "我自己更喜欢猫"
    elif _OTHER_SUBJECT.match(text):
        subject = "other"
    body = _ADVERBS.sub("", text.strip())
    done = body.endswith("了") or "过" in body
    return _Clause(_strip_trail(body), habit, temp, when, done), subject


def extract_zh_sentence(clauses: Sequence[Clause], ctx: RuleContext) -> list[Fact]:
    """Extract facts from the Chinese clauses of one sentence.

    An omitted subject is inherited from the previous clause (Chinese drops it all the time):
    a clause about someone else (他, 我们, 朋友 ...) makes the following subject-less clauses
    about them too, and a clause about a relative ("我妈妈喜欢跳舞，也喜欢唱歌") makes them facts
    about that relative (``family:母亲:跳舞``), never about the user.
    """
    facts: list[Fact] = []
    # Whether a clause of the sentence names something: a pet got with any verb is then read.
    ctx.naming_next = any(_NAMES_IT.match(_FILLERS.sub("", c.text)) for c in clauses[1:])
    # The pet the sentence just named: a following subject-less age is its age ("…叫年糕，今年两岁了").
    last_pet = ""
    # Who a subject-less clause is about: "" the user, "other", or a relation word ("妈妈").
    owner = ""
    # Whether the previous clause introduced someone or something ("养了一只猫", "有个弟弟"): a
    # following subject-less "叫X" names it, not the user.
    introduced = False
    # Whether an earlier clause of the sentence said something: a subject-less "叫X" after it
    # names what was just mentioned ("做了一道菜，叫回锅肉"), never the user.
    said = False
    for clause in clauses:
        text = clause.text
        if clause.question or _QUESTION_END.search(text) or _GREETING.fullmatch(text):
            continue
        if last_pet and not text.startswith("我"):
            aged = _pet_age(last_pet + text, ctx)
            if aged or _AGE_ALONE.match(text):  # a bare age after a pet is the pet's, never the user's
                facts.extend(aged or ())
                continue
        last_pet = ""
        found = _pet_age(text, ctx) or _plan_date(text, ctx) or _here_zh(text)
        if found:
            facts.extend(found)
            said = True
            continue
        prepared = _prepare(text, ctx)
        if prepared is None:
            continue
        c, subject = prepared
        earlier, said = said, said or bool(c.body) and not _GREETING.match(c.body)
        if subject == "user":
            reported = _REPORTED.match(c.body)
            if reported:
                rest = c.body[reported.end() :]
                if not rest.startswith(("我", "自己")) or rest.startswith("我们"):
                    owner = "other"  # "我知道他喜欢…": what follows is about someone else
                    continue
                c.body = _ADVERBS.sub("", rest.removeprefix("自己").removeprefix("我"))
        if subject == "other" or (subject == "" and owner == "other") or _ACQUAINTANCE.match(c.body):
            owner = "other"
            continue
        relative = _RELATIVE.match(c.body)
        if relative:
            owner = relative["rel"]
            about = _relative(owner, relative["pred"], c, ctx)
            # Only the user's own relative ("我小叔子…"): "孩子们还是…" may be anyone's.
            if (
                about is None
                and subject == "user"
                and relative["pred"]
                and not relative["pred"].startswith("的")
            ):
                about = _has_relative(owner)
            facts.extend(about or ())
            continue
        if subject == "" and owner:
            facts.extend(_relative(owner, c.body, c, ctx) or ())
            continue
        owner = ""
        if not c.body:
            continue
        name = _NAME.match(c.body) if subject == "" else None
        # "…，然后我给它取名叫旺财": naming it is said with or without the 我.
        named_it = subject == "" or c.body.startswith("给")
        pet_names = _PET_NAMES.match(c.body) if named_it and introduced else None
        if pet_names:
            # "一只叫豆豆，一只叫花卷": each clause names one more of the pets just introduced.
            introduced = c.body.startswith(("一只", "一个", "一条"))
            _name_previous(facts, pet_names["names"], one=introduced)
            continue
        if name and earlier:
            introduced = False
            continue
        introduced = bool(_INTRODUCES.match(c.body))
        for rule in _RULES:
            out = rule(c, ctx)
            if out:
                facts.extend(out)
                introduced = introduced or any(f.key.startswith("pet:") for f in out)
                pets = [f for f in out if f.key.startswith("pet:") and f.key.count(":") == 1]
                last_pet = next((n for n in ctx.pets if pets and norm_key(n) == pets[-1].key[4:]), "")
                break
    return _merge_state_and_food(facts)


# A subject-less age ("今年三岁了", "都十岁了"): after a pet it is the pet's.
_AGE_ALONE = lazy_compile(
    r"^(?:今年|已经|都|现在|快|也)*(?:\d{1,2}|[一二两三四五六七八九十]{1,3})(?:岁|个月)(?:多|半)?(?:大)?(?:了|啦)?$"
)


# Verbs of knowing and hearing: what follows is someone else's fact unless it is about 我 again.
_REPORTED = lazy_compile(
    r"^(?:知道|听说|听(?:别人|人家|朋友|他|她|他们)?说|觉得|认为|记得|以为|发现|猜|相信|感觉|看到|注意到|怀疑|确定|"
    r"肯定|明白|了解|担心|希望|听到|看出来?)"
)
_GREETING = lazy_compile(r"^(?:你好|您好|大家好|嗨|哈喽|hi|hello)(?:呀|啊|哦)?", re.IGNORECASE)
# "我们武汉这边…", "我这里武汉…": the user says where they are.
_HERE = lazy_compile(
    rf"^(?:我们|咱们|我)(?:这边|这里|这儿)?(?:在)?(?P<place>[{UNIFIED}]{{2,6}}?)(?:这边|这里|这儿)"
)


def _here_zh(text: str) -> list[Fact] | None:
    m = _HERE.match(text)
    if m is None or not _place(m["place"]) or m["place"] in ("国外", "老家", "农村"):
        return None
    place = m["place"]
    return [Fact(f"用户在{place}。", "profile", "profile:city", place, single_valued=True, confidence=0.7)]


# "有个弟弟", "有一个朋友", "养了一只猫": the clause brings in someone or something to be named next.
_INTRODUCES = lazy_compile(r"^(?:还)?(?:有|养了|养着|养)(?:一|两|几)?(?:个|只|条|位|匹|头)")


# "叫豆豆", "分别叫胡椒和盐巴", "叫做团子": the names of what was just introduced.
_PET_NAMES = lazy_compile(
    r"^(?:分别|一个|一只)?(?:给(?:它|他|她|它们|他们)(?:取|起)(?:了个?)?名字?|(?:取|起)名字?)?(?:叫做|叫作|名叫|叫|名字(?:是|叫))"
    rf"(?P<names>[{UNIFIED}A-Za-z]{{1,6}}(?:(?:和|、|跟|与)[{UNIFIED}A-Za-z]{{1,6}})*)$"
)


def _name_previous(facts: list[Fact], names: str, *, one: bool = False) -> None:
    """Name the pet(s) just mentioned ("我养了两只兔子，叫胡椒和盐巴"); anyone else is left unnamed.

    With ``one`` ("…两只仓鼠，一只叫豆豆，一只叫花卷") the clause names one of several: the unnamed
    fact stays for the next clause to name.
    """
    for i in range(len(facts) - 1, -1, -1):
        f = facts[i]
        species = f.value or ""
        if not f.key.startswith("pet:") or ":" in f.key[4:] or f.key[4:] != norm_key(species):
            continue  # not a pet, or a pet already named
        each = [n for n in re.split(r"和|、|跟|与", names) if n]
        if len(each) < 2 or not all(valid_zh_name(n) for n in each):
            each = [names]
        named = [
            Fact(
                f"用户养了一只叫{n}的{species}。",
                f.category,
                f"pet:{norm_key(n)}",
                species,
                confidence=f.confidence,
            )
            for n in each
        ]
        several = one and re.search(r"[两三四五六七八九十几]只", f.content) is not None
        facts[i:i] = named if several else []
        if not several:
            facts[i : i + 1] = named
        return


def _merge_state_and_food(facts: list[Fact]) -> list[Fact]:
    """``不要辣的，我最近胃不好`` -> one transient fact ``用户最近胃不好，不吃辣。``."""
    states = [f for f in facts if f.category == "state" and f.transient]
    foods = [f for f in facts if f.key.startswith("food:") and f.polarity == -1]
    if not states or not foods:
        return facts
    state = states[0]
    merged: list[Fact] = []
    for f in facts:
        if f is state:
            continue
        if any(f is food for food in foods):
            tail = f.content.removeprefix("用户")
            for marker in ("最近", "这几天", "这段时间", "这阵子", "目前", "暂时"):
                tail = tail.removeprefix(marker)
            f.content = state.content.removesuffix("。") + "，" + tail
            f.transient = True
            f.expires_at = state.expires_at
        merged.append(f)
    return merged

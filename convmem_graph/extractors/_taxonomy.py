"""One small taxonomy of what the heuristic rules recognise, Chinese and English side by side.

Each family is written once here; the word lists and patterns the rules match with are generated
from it (:mod:`convmem_graph.extractors._lexicon` builds its relation words from :data:`KINSHIP_ZH`
and :data:`KINSHIP_EN`; :mod:`convmem_graph.extractors._families` builds its patterns from the rest).
Adding a word to a family makes every rule of the family read it: a cousin is a relative wherever a
sister is, a halal diet is a diet wherever a vegetarian one is.

The subject word of a key stays the user's own word (``family:表妹``, ``food:gluten-free``), the
same scheme as the rest of the extractor (see :mod:`convmem_graph.extractors.heuristic`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = [
    "ALCOHOL_ZH",
    "DIETS_EN",
    "DIETS_ZH",
    "INSTRUMENTS_EN",
    "INTOLERANCES_EN",
    "INTOLERANCES_ZH",
    "INSTRUMENTS_ZH",
    "KINSHIP_EN",
    "KINSHIP_ZH",
    "PAST_TIMES_ZH",
    "PET_SPECIES_ZH",
    "PET_VERBS_EN",
    "PET_VERBS_ZH",
    "QUIT_ZH",
    "SPORTS_EN",
    "SPORT_ACTIVITIES_EN",
    "SPORT_ACTIVITIES_ZH",
    "SPORTS_ZH",
    "alternation",
]


def _canon(groups: str) -> dict[str, str]:
    """``"canon: a b c"`` lines -> word -> canonical word (the canonical word maps to itself)."""
    out: dict[str, str] = {}
    for line in groups.strip().splitlines():
        canon, _, words = line.partition(":")
        canon = canon.strip()
        out[canon] = canon
        for w in words.split():
            out[w] = canon
    return out


#: Chinese kinship terms -> the relation word a key uses. Nuclear family, grandparents, the whole
#: 表/堂 and 姑/舅/姨/叔/伯 families, in-laws, step-family and partners.
KINSHIP_ZH = _canon(
    """
    妻子: 老婆 太太 媳妇
    丈夫: 老公 先生
    爱人:
    父亲: 爸爸 爸 老爸 爹
    母亲: 妈妈 妈 老妈
    父母: 爸妈
    儿子:
    女儿:
    孩子: 小孩 宝宝 孩子们
    哥哥: 哥 大哥 二哥
    姐姐: 姐 大姐 二姐
    弟弟: 弟 小弟
    妹妹: 妹 小妹
    爷爷: 祖父
    奶奶: 祖母
    外公: 姥爷 外祖父
    外婆: 姥姥 外祖母
    表哥:
    表姐:
    表弟:
    表妹:
    堂哥:
    堂姐:
    堂弟:
    堂妹:
    舅舅: 舅 大舅 二舅 小舅
    舅妈:
    姑姑: 姑妈 大姑 小姑
    姑父:
    姨妈: 小姨 大姨 姨
    姨父:
    叔叔: 叔 二叔 小叔
    婶婶: 婶
    伯伯: 伯父 大伯
    伯母:
    侄子:
    侄女:
    外甥:
    外甥女:
    孙子:
    孙女:
    外孙:
    外孙女:
    公公:
    婆婆:
    岳父: 老丈人
    岳母: 丈母娘
    嫂子: 嫂
    姐夫:
    妹夫:
    弟媳: 弟妹
    儿媳: 儿媳妇
    女婿:
    继父: 后爸
    继母: 后妈
    男朋友: 男友
    女朋友: 女友
    未婚夫:
    未婚妻:
    对象:
    小舅子: 大舅子
    小姨子: 大姨子
    连襟:
    妯娌:
    亲家:
    表叔:
    表姑:
    表舅:
    表姨:
    堂叔:
    太爷爷: 曾祖父
    太奶奶: 曾祖母
    干爹: 干爸
    干妈:
    继子:
    继女:
    """
)

# Ordinals before an aunt or uncle ("二姨", "三姑", "四舅", "二婶"): the same relation.
for _base, _canon_word in (
    ("姨", "姨妈"),
    ("姑", "姑姑"),
    ("舅", "舅舅"),
    ("叔", "叔叔"),
    ("伯", "伯伯"),
    ("婶", "婶婶"),
):
    for _ordinal in "大二三四五六小老":
        KINSHIP_ZH.setdefault(_ordinal + _base, _canon_word)


def _generate_kinship_zh(table: dict[str, str]) -> None:
    """Add the terms Chinese builds from the base ones, so the class is whole, not a list.

    Ordinals before any sibling or in-law ("三哥", "二嫂", "三舅妈"); the 表/堂 cousins of every
    generation ("表侄女", "堂叔"); godparents and godchildren ("干儿子"); a spouse's siblings
    ("小叔子", "大姑子", "妻弟"); the spouses of the younger generation ("侄媳妇", "孙女婿"); and
    great-grandparents and great-grandchildren ("太姥姥", "重孙女"). Each keeps its own word as
    its key, except ordinals, which are the same relation.
    """
    for base, canon in (
        ("哥", "哥哥"),
        ("姐", "姐姐"),
        ("弟", "弟弟"),
        ("妹", "妹妹"),
        ("嫂", "嫂子"),
        ("舅妈", "舅妈"),
        ("姨父", "姨父"),
        ("姨夫", "姨父"),
        ("姑父", "姑父"),
        ("伯母", "伯母"),
        ("姐夫", "姐夫"),
    ):
        for ordinal in "大二三四五六七小老":
            table.setdefault(ordinal + base, canon)
    words = [f"表{w}" for w in "哥 姐 弟 妹 叔 姑 舅 姨 嫂 侄 侄子 侄女 外甥 外甥女 姐夫 妹夫".split()]
    words += [f"堂{w}" for w in "哥 姐 弟 妹 叔 伯 姑 嫂 侄 侄子 侄女 姐夫 妹夫".split()]
    words += [f"干{w}" for w in "爹 爸 妈 儿子 女儿 哥 姐 弟 妹 爷爷 奶奶 闺女".split()]
    words += [f"{a}{b}子" for a in "大小" for b in "叔伯姑舅姨"]  # a spouse's siblings
    words += [f"{a}{b}" for a in "妻内" for b in "弟兄妹姐"]
    words += [f"{a}{b}" for a in ("侄", "孙", "外甥", "外孙") for b in ("媳妇", "女婿")]
    words += [f"{a}{b}" for a in "重曾" for b in ("孙", "孙子", "孙女", "外孙", "外孙女")]
    words += [f"太{w}" for w in "姥姥 姥爷 外婆 外公".split()]
    for word in words:
        table.setdefault(word, word)
    for word in ("老伴", "老伴儿", "另一半"):
        table.setdefault(word, "爱人")
    table.setdefault("闺女", "女儿")
    table.setdefault("公婆", "公婆")


_generate_kinship_zh(KINSHIP_ZH)

#: Past times said before what happened ("去年冬天", "前几天", "三年前"): when a pet was got, a habit
#: quit. The date finder resolves what is planned, not these.
PAST_TIMES_ZH = (
    r"(?:(?:去年|前年|今年|上个?月|上周|上个?星期|上礼拜|前几天|前两天|前些天|前阵子|前段时间|昨天|前天|刚刚|刚|最近|"
    r"(?:\d{1,4}|[一二两三四五六七八九十几]+)(?:年|个月|天|周|星期)(?:前|以前)?|(?:[一二三四五六七八九十]{1,2}|\d{1,2})月份?)"
    r"(?:春天|夏天|秋天|冬天|年初|年底|底|初|(?:[一二三四五六七八九十]{1,2}|\d{1,2})月份?)?)"
)

#: English kinship terms -> the relation word a key uses (plural and familiar forms folded).
KINSHIP_EN = _canon(
    """
    wife:
    husband:
    partner:
    spouse:
    mother: mom mum mommy mama
    father: dad daddy papa
    parents:
    son: sons
    daughter: daughters
    child: kid kids children baby
    brother: brothers
    sister: sisters
    sibling: siblings
    grandmother: grandma granny
    grandfather: grandpa granddad
    grandparents:
    cousin: cousins
    aunt: auntie aunts
    uncle: uncles
    niece: nieces
    nephew: nephews
    grandson: grandsons
    granddaughter: granddaughters
    grandchild: grandkids grandchildren
    stepmother: stepmom
    stepfather: stepdad
    stepson:
    stepdaughter:
    mother-in-law:
    father-in-law:
    sister-in-law:
    brother-in-law:
    son-in-law:
    daughter-in-law:
    godmother:
    godfather:
    godson:
    goddaughter:
    stepbrother:
    stepsister:
    half-brother:
    half-sister:
    great-grandmother: great-grandma
    great-grandfather: great-grandpa
    great-aunt:
    great-uncle:
    boyfriend:
    girlfriend:
    fiance:
    fiancee:
    """
)


def _generate_kinship_en(table: dict[str, str]) -> None:
    """Add the terms English builds from the base ones ("in-law", "step", "half", "great", "ex").

    Any base relation takes "-in-law" ("daughter-in-law"), a parent, sibling or child "step"
    ("stepsister"), a sibling "half-" ("half-brother"), a grandparent, grandchild, aunt or uncle
    "great-" and "great-great-" ("great-grandma"), a niece or nephew "grand"/"great-"
    ("grandniece"), and a partner "ex-" ("ex-wife"). Each keeps its own word as its key (folded
    from its familiar form: "great-grandma" -> "great-grandmother").
    """
    for base in ("mother", "father", "sister", "brother", "son", "daughter", "parents"):
        table.setdefault(f"{base}-in-law", f"{base}-in-law")
    table.setdefault("in-laws", "in-laws")
    for base in ("mother", "father", "brother", "sister", "son", "daughter", "parent", "parents", "kids"):
        table.setdefault(f"step{base}", f"step{base}")
        table.setdefault(f"step-{base}", f"step{base}")
    for base in ("brother", "sister", "sibling"):
        table.setdefault(f"half-{base}", f"half-{base}")
        table.setdefault(f"half {base}", f"half-{base}")
    for great in ("great-", "great-great-"):
        for word, canon in list(table.items()):
            if canon.startswith("grand") or canon in ("aunt", "uncle"):
                table.setdefault(great + word, great + canon)
    for base in ("niece", "nephew"):
        table.setdefault(f"grand{base}", f"grand{base}")
        table.setdefault(f"great-{base}", f"grand{base}")
    for base in ("wife", "husband", "partner", "boyfriend", "girlfriend", "fiance", "fiancee", "spouse"):
        table.setdefault(f"ex-{base}", f"ex-{base}")


_generate_kinship_en(KINSHIP_EN)

#: English diets -> the word a ``food:`` key keeps. "I'm X", "I've been X since ...", "I eat X",
#: "I keep X", "I'm on a X diet" all read these.
DIETS_EN = _canon(
    """
    vegetarian:
    vegan:
    pescatarian:
    gluten-free: gluten free
    dairy-free: dairy free
    lactose-free: lactose free
    sugar-free: sugar free
    nut-free: nut free
    halal:
    kosher:
    keto: ketogenic
    paleo:
    low-carb: low carb
    low-sodium: low sodium low-salt
    plant-based: plant based
    """
)

#: Chinese diets -> the word a ``food:`` key keeps ("我吃清真", "我在吃生酮", "我是无麸质饮食").
DIETS_ZH = _canon(
    """
    清真: 清真饮食
    生酮: 生酮饮食
    低碳水: 低碳 低碳水饮食
    无麸质: 无麸质饮食
    低盐: 少盐
    低糖: 少糖 控糖
    """
)

#: What the body does not tolerate, besides allergies: "I'm lactose intolerant", "I have fructose
#: intolerance", "我乳糖不耐受", "我有麸质不耐症" all read these (a ``health:`` key, not ``allergy:``).
INTOLERANCES_EN = frozenset("lactose gluten fructose histamine caffeine alcohol sulfite".split())
INTOLERANCES_ZH = frozenset("乳糖 麸质 果糖 组胺 咖啡因 酒精".split())

#: What a quit habit is called: "戒烟" / "戒了烟" -> 抽烟 (the habit given up), in its plain verb form.
QUIT_ZH = {
    "烟": "抽烟",
    "酒": "喝酒",
    "咖啡": "喝咖啡",
    "奶茶": "喝奶茶",
    "糖": "吃糖",
    "游戏": "打游戏",
    "槟榔": "嚼槟榔",
}

#: Kinds of alcohol: drinking any of them is the habit 喝酒 ("以前一天喝两瓶啤酒，后来戒了").
ALCOHOL_ZH = {w: "酒" for w in "啤酒 白酒 红酒 黄酒 洋酒 米酒 烧酒 葡萄酒 威士忌".split()}

#: Instruments, each with the verb Chinese plays it with (弹钢琴, 拉小提琴, 吹萨克斯, 打鼓).
INSTRUMENTS_ZH = {
    "钢琴": "弹",
    "吉他": "弹",
    "古筝": "弹",
    "琵琶": "弹",
    "尤克里里": "弹",
    "电子琴": "弹",
    "贝斯": "弹",
    "古琴": "弹",
    "小提琴": "拉",
    "大提琴": "拉",
    "二胡": "拉",
    "手风琴": "拉",
    "中提琴": "拉",
    "笛子": "吹",
    "长笛": "吹",
    "萨克斯": "吹",
    "口琴": "吹",
    "小号": "吹",
    "葫芦丝": "吹",
    "单簧管": "吹",
    "架子鼓": "打",
    "鼓": "打",
}
INSTRUMENTS_EN = frozenset(
    """
    piano guitar violin cello viola bass drums ukulele flute saxophone sax trumpet trombone clarinet
    harp harmonica banjo mandolin accordion oboe keyboard organ
    """.split()
)

#: Sports, each with the verb Chinese does it with (打网球, 踢足球, 滑雪, 练瑜伽 ...).
SPORTS_ZH = {
    "网球": "打",
    "羽毛球": "打",
    "乒乓球": "打",
    "篮球": "打",
    "排球": "打",
    "高尔夫": "打",
    "台球": "打",
    "棒球": "打",
    "壁球": "打",
    "匹克球": "打",
    "足球": "踢",
    "毽子": "踢",
    "瑜伽": "练",
    "普拉提": "练",
    "拳击": "练",
    "太极": "打",
    "太极拳": "打",
    "跆拳道": "练",
    "武术": "练",
    "泳": "游",
}
SPORTS_EN = frozenset(
    """
    tennis badminton basketball volleyball football soccer baseball golf squash hockey cricket rugby
    pickleball ping-pong table-tennis handball softball lacrosse polo chess
    """.split()
)
#: Sports said with another verb than "play", by that verb: "I go hiking", "I do judo", "I run".
SPORT_ACTIVITIES_EN: dict[str, frozenset[str]] = {
    "go": frozenset(
        """
        hiking swimming climbing bouldering skiing snowboarding surfing running jogging cycling biking
        kayaking canoeing sailing skating rowing diving scuba-diving horseback-riding fishing
        """.split()
    ),
    "do": frozenset(
        """
        yoga pilates judo karate taekwondo aikido crossfit boxing kickboxing ballet gymnastics fencing
        archery jiu-jitsu
        """.split()
    )
    | {"kung fu", "tai chi", "martial arts", "rock climbing", "weight lifting", "weightlifting"},
    "bare": frozenset("run swim surf ski climb cycle hike box fence skate row".split()),
}

#: Sports Chinese says as one verb, no object: "我会游泳", "我会滑雪".
SPORT_ACTIVITIES_ZH = frozenset(
    """
    游泳 滑雪 滑冰 溜冰 潜水 冲浪 攀岩 骑马 骑行 徒步 登山 划船 跳水 击剑 射箭 轮滑 滑板 皮划艇 自由潜
    """.split()
)

#: Chinese pet species and breeds, with the nicknames breeds go by ("二哈" is a husky, "金毛" a
#: golden retriever): any of them is a pet wherever "猫" is.
PET_SPECIES_ZH = tuple(
    """
    猫咪 猫 狗狗 狗 犬 兔子 兔 鹦鹉 鸟 仓鼠 乌龟 龟 金鱼 鱼 小猪 猪 蜥蜴 刺猬 龙猫 松鼠
    荷兰猪 豚鼠 蛇 守宫 八哥 玄凤 虎皮鹦鹉 牡丹鹦鹉 文鸟 画眉
    柯基 柴犬 金毛 哈士奇 二哈 哈奇士 泰迪 萨摩耶 边牧 边境牧羊犬 拉布拉多 拉拉 比熊 博美
    阿拉斯加 德牧 牧羊犬 杜宾 法斗 斗牛犬 巴哥 吉娃娃 腊肠 雪纳瑞 约克夏 马尔济斯 西高地
    贵宾 秋田 中华田园犬 田园犬 土狗 小土狗 马犬
    布偶 英短 美短 暹罗 银渐层 金渐层 蓝猫 狸花 狸花猫 三花 橘猫 加菲 折耳 缅因
    无毛猫 豹猫 奶牛猫 黑猫 白猫
    """.split()
)

#: Verbs of getting a pet, any of which makes a pet the user has (领养, 捡了, adopted, rescued ...).
PET_VERBS_ZH = (
    "养了",
    "养着",
    "养",
    "领养了",
    "领养",
    "收养了",
    "收养",
    "捡了",
    "捡到了",
    "捡到",
    "买了",
    "新养了",
    "接回了",
    "救了",
    "救助了",
    "收留了",
    "收留",
    "新添了",
    "添了",
    "抱回了",
    "抱回来了",
    "领回了",
    "领回来了",
    "带回了",
    "捡回了",
    "捡回来了",
    "入手了",
)
PET_VERBS_EN = ("adopted", "rescued", "got", "bought", "brought home", "took in")


def alternation(words: Iterable[str]) -> str:
    """A regex alternation of ``words``, longest first (so 表妹 wins over 妹).

    Example:
        >>> alternation(["妹", "表妹"])
        '表妹|妹'
    """
    items = sorted(set(words), key=lambda w: (-len(w), w))
    return "|".join(re.escape(w) for w in items)

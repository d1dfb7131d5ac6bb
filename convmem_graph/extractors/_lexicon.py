"""Small word lists the heuristic extractor validates its matches against (zh + en).

They are deliberately short: a rule such as "我在X工作" only yields a city when X looks like a
place, and "I'm a X" only yields an occupation when X ends in a job noun. Anything outside these
lists is missed rather than guessed.
"""

from __future__ import annotations

from convmem_graph.extractors._taxonomy import KINSHIP_EN, KINSHIP_ZH, PET_SPECIES_ZH, alternation
from convmem_graph.text._lazy_re import lazy_compile
from convmem_graph.text.cjk import UNIFIED

__all__ = [
    "EN_FOODS",
    "EN_JOB_NOUNS",
    "EN_RELATIONS",
    "EN_SPECIES",
    "ZH_CITIES",
    "ZH_FOODS",
    "ZH_JOB_RE",
    "ZH_PLACE_RE",
    "ZH_RELATIONS",
    "ZH_SPECIES_RE",
    "en_relation",
    "zh_relation",
]

ZH_CITIES = frozenset(
    """
    北京 上海 天津 重庆 广州 深圳 杭州 南京 苏州 成都 武汉 西安 长沙 郑州 青岛 大连 厦门 宁波 济南 沈阳
    哈尔滨 长春 合肥 福州 昆明 贵阳 南宁 南昌 太原 石家庄 兰州 西宁 银川 乌鲁木齐 拉萨 呼和浩特 海口 三亚
    无锡 常州 珠海 东莞 佛山 温州 绍兴 嘉兴 金华 台州 湖州 徐州 扬州 南通 烟台 威海 洛阳 桂林 泉州 惠州
    中山 汕头 保定 唐山 大理 丽江 香港 澳门 台北 高雄 新加坡 东京 大阪 京都 首尔 纽约 伦敦 巴黎 悉尼
    墨尔本 洛杉矶 旧金山 西雅图 波士顿 芝加哥 多伦多 温哥华 柏林 慕尼黑 罗马 米兰 曼谷 吉隆坡 迪拜
    浙江 江苏 广东 四川 湖南 湖北 河南 河北 山东 山西 陕西 福建 安徽 江西 云南 贵州 广西 海南 辽宁 吉林
    黑龙江 内蒙古 内蒙 新疆 西藏 甘肃 青海 宁夏 台湾 东北 美国 英国 日本 韩国 加拿大 澳洲 澳大利亚 德国
    法国 意大利 国外 老家 农村
    """.split()
)

#: A place: a known city/province/country, or a name with an administrative suffix.
ZH_PLACE_RE = lazy_compile(
    r"(?:" + "|".join(sorted(ZH_CITIES, key=len, reverse=True)) + r")(?:市|省)?"
    rf"|[{UNIFIED}]{{1,5}}(?:市|省|县|区|镇|村|州)"
)

_ZH_JOB_SUFFIXES = """
产品经理 项目经理 经理 工程师 程序员 设计师 分析师 架构师 咨询师 会计师 建筑师 摄影师 化妆师 理发师
营养师 心理咨询师
老师 教师 教授 讲师 医生 大夫 护士 药剂师 律师 会计 记者 编辑 作家 编剧 导演 司机 厨师 警察 军人
农民 工人 老板
总监 主管 总裁 店长 销售 客服 运营 保安 演员 歌手 模特 主播 博主 翻译 导游 顾问 研究员 科学家 公务员
学生 大学生
研究生 博士生 硕士生 高中生 初中生 小学生 实习生 自由职业者 全职妈妈 全职太太 快递员 外卖员 服务员
收银员 消防员
飞行员 空姐 乘务员 志愿者 画家 音乐家 舞者 健身教练 教练 创业者 HR 人事 财务 前端 后端 码农
""".split()

#: An occupation phrase ending in a job noun (optional short qualifier before it).
ZH_JOB_RE = lazy_compile(
    rf"^[{UNIFIED}A-Za-z]{{0,6}}?(?:" + "|".join(sorted(_ZH_JOB_SUFFIXES, key=len, reverse=True)) + r")$"
    # Any agent noun of a trade is a job (分拣员, 调度员, 保洁员, 护工, 焊工, 木匠, 园艺师), except the
    # words for belonging to something (会员, 党员, 队员 ...), which say membership, not work.
    rf"|^(?![{UNIFIED}]*(?:会员|成员|队员|党员|团员|社员|组员|学员|球员|演员表)$)[{UNIFIED}]{{1,4}}(?:员|师|工|匠)$"
    # A doctor of any kind (牙医, 兽医, 中医) too.
    rf"|^[{UNIFIED}]{{1,2}}医$"
)

#: A pet: species or breed, with up to three qualifier characters before it (橘猫, 小黑狗).
ZH_SPECIES_RE = lazy_compile(
    rf"^(?:(?![的像和与])[{UNIFIED}]){{0,3}}?(?:" + alternation(PET_SPECIES_ZH) + r")$"
)

# Generated from the one taxonomy: every kinship term of the family, not a hand-kept short list.
_ZH_REL_CANON = dict(KINSHIP_ZH)
ZH_RELATIONS = alternation(_ZH_REL_CANON)


def zh_relation(word: str) -> str:
    """Return the canonical Chinese relation word (``老婆`` -> ``妻子``)."""
    return _ZH_REL_CANON.get(word, word)


ZH_FOODS = frozenset(
    """
    香菜 葱 姜 蒜 辣椒 辣 麻辣 花椒 甜 酸 咸 苦 油腻 海鲜 鱼 虾 蟹 螃蟹 牛肉 猪肉 羊肉 鸡肉 肉 鸡蛋 蛋 牛奶 奶
    乳制品 花生 坚果 芒果 菠萝 榴莲 草莓 苹果 香蕉 西瓜 水果 蔬菜 青菜 米饭 面 面条 饺子 火锅 烧烤 甜食 甜品
    蛋糕 巧克力 冰淇淋 咖啡 茶 奶茶 酒 啤酒 白酒 红酒 可乐 饮料 生冷 冰 冷饮 内脏 鸭血 豆腐 臭豆腐 韭菜 芹菜
    洋葱 胡萝卜 茄子 苦瓜 青椒 香肠 零食 面包 披萨 汉堡 寿司 麻辣烫 小龙虾 螺蛳粉 川菜 湘菜 粤菜 日料 西餐
    """.split()
)

EN_JOB_NOUNS = frozenset(
    """
    teacher engineer manager developer programmer nurse doctor physician surgeon designer student
    lawyer attorney
    accountant writer author artist painter chef cook driver consultant analyst scientist researcher professor
    photographer musician counselor therapist psychologist firefighter officer pilot architect
    pharmacist dentist
    veterinarian vet mechanic electrician plumber farmer librarian journalist editor salesperson marketer
    entrepreneur founder ceo cto intern freelancer barista waiter waitress cashier clerk secretary assistant
    instructor coach trainer dancer singer actor actress athlete soldier banker investor realtor recruiter
    translator tutor professor lecturer administrator coordinator director supervisor specialist technician
    carpenter baker butcher tailor housewife homemaker retiree volunteer blogger youtuber streamer
    paramedic midwife surveyor optometrist radiologist hairdresser stylist gardener janitor receptionist
    courier sailor fisherman welder bartender chemist biologist physicist economist statistician historian
    detective judge paralegal nanny caregiver worker programmer illustrator animator copywriter pastor
    """.split()
)

EN_SPECIES = frozenset(
    "cat cats kitten kitty dog dogs puppy pup rabbit bunny hamster parrot bird fish goldfish turtle tortoise "
    "snake lizard gecko guinea pig ferret horse pony hedgehog "
    # Breeds and small pets are species too: "we rescued a greyhound", "I got a budgie".
    "greyhound labrador poodle beagle corgi husky terrier retriever dachshund chihuahua pug bulldog "
    "collie spaniel shiba mutt dragon canary budgie cockatiel parakeet chinchilla gerbil axolotl iguana "
    "tabby shepherd schnauzer rottweiler pomeranian doodle labradoodle goldendoodle maltese dalmatian "
    "ragdoll siamese".split()
)

_EN_REL_CANON = dict(KINSHIP_EN)
EN_RELATIONS = alternation(_EN_REL_CANON)


def en_relation(word: str) -> str:
    """Return the canonical English relation word (``kids`` -> ``child``)."""
    return _EN_REL_CANON.get(word.lower(), word.lower())


EN_FOODS = frozenset(
    """
    coriander cilantro garlic onion onions spicy mango mangoes peanut peanuts nuts shellfish seafood shrimp
    fish meat pork beef chicken lamb eggs egg milk dairy cheese gluten wheat soy sugar sweets
    chocolate coffee tea
    alcohol beer wine sushi pizza pasta noodles rice bread burgers steak tacos curry cake fruit vegetables
    strawberries bananas apples durian tofu mushrooms olives olive tomatoes tomato peppers eggplant broccoli
    cucumber celery liver anchovies oysters tuna salmon avocado spinach kale beans lentils yogurt butter
    cream salad soup oatmeal cereal bacon sausage ham turkey duck crab lobster squid octopus coconut
    pineapple grapes cherries peaches pears oranges lemons blueberries raspberries watermelon melon kiwi
    cinnamon ginger chili chilli wasabi mayo mayonnaise ketchup mustard vinegar licorice popcorn chips fries
    donuts cookies candy soda juice ramen dumplings kimchi cauliflower zucchini pickles peas corn potatoes
    caffeine carbs sweets desserts snacks pop
    """.split()
) | {
    "ice cream",
    "spicy food",
    "junk food",
    "fast food",
    "red meat",
    "energy drinks",
    "fried food",
    "processed food",
}

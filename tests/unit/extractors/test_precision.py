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


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Pets got with any verb, at any time said before or after, named in the next clause.
        ("我前年收养了一只柴犬，叫可乐。", [("pet:可乐", "用户养了一只叫可乐的柴犬。")]),
        ("上周我在小区门口捡到一只小猫，给它起名叫布丁。", [("pet:布丁", "用户养了一只叫布丁的小猫。")]),
        ("我家新添了一只仓鼠。", [("pet:仓鼠", "用户养了一只仓鼠。")]),
        ("我小时候养过一只兔子。", []),
        (
            "Three weeks ago we rescued a beagle named Toast.",
            [("pet:toast", "User rescued a beagle named Toast.")],
        ),
        (
            "My son and I got a kitten, and we call her Olive.",
            [("pet:olive", "User got a kitten named Olive.")],
        ),
        # Intolerances are lasting health facts; an allergy list is one fact per allergen.
        ("我有乳糖不耐症。", [("health:乳糖不耐受", "用户乳糖不耐受。")]),
        ("I have fructose intolerance.", [("health:fructose_intolerant", "User is fructose intolerant.")]),
        ("I'm coeliac.", [("health:celiac_disease", "User has celiac disease.")]),
        ("我对虾和螃蟹过敏。", [("allergy:虾", "用户对虾过敏。"), ("allergy:螃蟹", "用户对螃蟹过敏。")]),
        (
            "I'm allergic to bees, latex and penicillin.",
            [
                ("allergy:bees", "User is allergic to bees."),
                ("allergy:latex", "User is allergic to latex."),
                ("allergy:penicillin", "User is allergic to penicillin."),
            ],
        ),
        # Diets with a reason after a comma, a duration after 已经.
        ("I don't eat beef, for health reasons.", [("food:beef", "User doesn't eat beef.")]),
        ("我吃素已经三年了。", [("food:素食", "用户吃素。")]),
        # Instruments and sports in their other forms.
        ("我学过三年大提琴。", [("pref:拉大提琴", "用户学过三年大提琴。")]),
        ("我吹了五年萨克斯。", [("pref:吹萨克斯", "用户吹了五年萨克斯。")]),
        ("我会潜水。", [("pref:潜水", "用户会潜水。")]),
        ("我是公司足球队的。", [("pref:踢足球", "用户是公司足球队的队员。")]),
        ("I've been playing the cello for ten years.", [("pref:play_the_cello", "User plays the cello.")]),
        ("I play in a local hockey league.", [("pref:play_hockey", "User plays hockey.")]),
        ("I go bouldering on weekends.", [("pref:bouldering", "User goes bouldering on weekends.")]),
        ("I do judo.", [("pref:judo", "User does judo.")]),
        ("I swim laps.", [("pref:swim_laps", "User swims laps.")]),
        ("I go running twice a week.", [("habit:go_running", "User goes running twice a week.")]),
        # Kinship: any relative, in-laws and step-family included.
        ("我大姨子是护士。", [("family:小姨子", "用户的大姨子是护士。")]),
        ("我舅舅在昆明开了一家面馆。", [("family:舅舅", "用户的舅舅在昆明开了一家面馆。")]),
        ("My stepsister is a vet.", [("family:stepsister", "User's stepsister is a vet.")]),
        ("My grandpa was born in Porto.", [("family:grandfather", "User's grandpa was born in Porto.")]),
        ("My half-sister moved to Quebec.", [("family:half-sister", "User's half-sister moved to Quebec.")]),
    ],
)
def test_taxonomy_family_covers_its_class(text: str, expected: list[tuple[str, str]]) -> None:
    assert sorted(_facts(text)) == sorted(expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # The household's pet, named by "我给它…"; several pets named one clause at a time.
        ("我们家去年领养了一只边牧，然后我给它起名叫闪电。", [("pet:闪电", "用户养了一只叫闪电的边牧。")]),
        (
            "我养了两只鹦鹉，一只叫小绿，一只叫小黄。",
            [
                ("pet:小绿", "用户养了一只叫小绿的鹦鹉。"),
                ("pet:小黄", "用户养了一只叫小黄的鹦鹉。"),
                ("pet:鹦鹉", "用户养了两只鹦鹉。"),
            ],
        ),
        # A quit habit with how long ago; an allergy list with 都; a relative's city and studies.
        ("我戒酒差不多两年了。", [("habit:喝酒", "用户不再喝酒。")]),
        (
            "我对桃子和李子都过敏。",
            [("allergy:桃子", "用户对桃子过敏。"), ("allergy:李子", "用户对李子过敏。")],
        ),
        ("我舅舅一家都在西宁。", [("family:舅舅", "用户的舅舅一家都在西宁。")]),
        ("我妈妈在厨房。", []),
        ("我外甥准备去日本留学。", [("family:外甥", "用户的外甥准备去日本留学。")]),
        # English: a habit named in a "used to" clause and given up in the next one.
        ("I used to vape, but I quit a few months ago.", [("habit:vape", "User no longer vapes.")]),
        ("I do pilates three times a week.", [("habit:do_pilates", "User does pilates three times a week.")]),
        ("I always do that every day.", []),
        # In-laws are relatives of the class like any other (generated from the taxonomy).
        ("My in-laws are both retired.", [("family:in-laws", "User's in-laws are both retired.")]),
        (
            "My grandparents are still in Kerala.",
            [("family:grandparents", "User's grandparents are still in Kerala.")],
        ),
        ("My kids are so excited about the trip.", []),
        ("My daughter has a peanut allergy.", [("family:daughter", "User's daughter has a peanut allergy.")]),
        ("We got a rabbit for the kids, Clover.", [("pet:clover", "User got a rabbit named Clover.")]),
        ("I play the oboe in a youth orchestra.", [("pref:play_the_oboe", "User plays the oboe.")]),
        (
            "I've been playing piano for six years, mostly jazz.",
            [("pref:play_the_piano", "User plays the piano.")],
        ),
        (
            "My wife likes tennis, but I'm more into squash.",
            [("family:wife:tennis", "User's wife likes tennis."), ("pref:squash", "User is into squash.")],
        ),
        ("I quit smoking around three years ago.", [("habit:smoke", "User no longer smokes.")]),
        (
            "I'm learning about sailing.",
            [("state:learning_about_sailing", "User is learning about sailing.")],
        ),
    ],
)
def test_family_reads_longer_turns(text: str, expected: list[tuple[str, str]]) -> None:
    assert sorted(_facts(text)) == sorted(expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Going to a place is the habit; going to do something is the something.
        ("我每周都去健身房。", [("habit:去健身房", "用户每周去健身房。")]),
        ("我每天去游泳。", [("habit:游泳", "用户每天游泳。")]),
        # 叫 with a frequency orders something; it names no one.
        ("我周末经常叫外卖。", []),
        # A title or a quote cut at the clause's edge is closed again.
        ("我最喜欢的歌是《晴天》。", [("pref:最喜欢的歌", "用户最喜欢的歌是《晴天》。")]),
        # "还是" is "still / rather", not "also is".
        ("孩子们还是最喜欢去游乐场。", []),
    ],
)
def test_wording_stays_whole(text: str, expected: list[tuple[str, str]]) -> None:
    assert sorted(_facts(text)) == sorted(expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Round three (prompted by multiclause_heldout3.jsonl), on sentences written for this test.
        ("我堂妹明年要到广州实习。", [("family:堂妹", "用户的堂妹要到广州实习。")]),
        ("我儿子上幼儿园了。", [("family:儿子", "用户的儿子上幼儿园。")]),
        ("我去年从朋友那里领养了一只兔子。", [("pet:兔子", "用户养了一只兔子。")]),
        (
            "我养了一条金鱼和一只乌龟。",
            [("pet:金鱼", "用户养了一条金鱼。"), ("pet:乌龟", "用户养了一只乌龟。")],
        ),
        ("我从大学开始踢足球。", [("pref:踢足球", "用户从大学开始踢足球。")]),
        (
            "My nephew just started school in Leeds, he's six.",
            [("family:nephew", "User's nephew just started school in Leeds.")],
        ),
        ("My brother has three daughters.", [("family:brother", "User's brother has three daughters.")]),
        (
            "My grandmother was a seamstress.",
            [("family:grandmother", "User's grandmother was a seamstress.")],
        ),
        ("My mom was sick all week.", []),
        ("I quit soda two years ago.", [("food:soda", "User gave up soda.")]),
        ("I quit my job.", []),
        (
            "I play the cello in a string quartet on Sundays.",
            [("pref:play_the_cello", "User plays the cello.")],
        ),
        (
            "We adopted two dogs from a rescue last spring, Rex and Lulu.",
            [("pet:rex", "User adopted a dog named Rex."), ("pet:lulu", "User adopted a dog named Lulu.")],
        ),
        (
            "I used to smoke on weekends, but I gave it up after my daughter was born.",
            [("habit:smoke", "User no longer smokes.")],
        ),
    ],
)
def test_family_round_three(text: str, expected: list[tuple[str, str]]) -> None:
    assert sorted(_facts(text)) == sorted(expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Round four (prompted by multiclause_heldout4.jsonl), on sentences written for this test.
        ("我三姑在厦门开了一家花店。", [("family:姑姑", "用户的三姑在厦门开了一家花店。")]),
        ("我前年夏天收养了一只小猫，叫年年。", [("pet:年年", "用户养了一只叫年年的小猫。")]),
        ("我高中的时候学过两年长笛。", [("pref:吹长笛", "用户学过两年长笛。")]),
        ("我上个月刚戒了烟。", [("habit:抽烟", "用户不再抽烟。")]),
        ("我表哥考上了研究生。", [("family:表哥", "用户的表哥考上了研究生。")]),
        (
            "I cycle to work every Friday, and honestly it's the best part of my week.",
            [("habit:cycle_to_work", "User cycles to work every Friday.")],
        ),
        (
            "My younger sister is a pharmacist in Perth.",
            [("family:sister", "User's younger sister is a pharmacist in Perth.")],
        ),
        (
            "I have a slight dust allergy, no big deal.",
            [("allergy:dust", "User is mildly allergic to dust.")],
        ),
        (
            "We have three cats, Tom, Kit and Moss.",
            [
                ("pet:tom", "User has a cat named Tom."),
                ("pet:kit", "User has a cat named Kit."),
                ("pet:moss", "User has a cat named Moss."),
            ],
        ),
        ("We have a meeting at noon.", []),
        (
            "I'm gluten intolerant, but rice is fine.",
            [("health:gluten_intolerant", "User is gluten intolerant.")],
        ),
        ("My son just turned seven.", [("family:son", "User's son just turned seven.")]),
        (
            "I do yoga on Tuesdays and Thursdays.",
            [("pref:yoga", "User does yoga on Tuesdays and Thursdays.")],
        ),
    ],
)
def test_family_round_four(text: str, expected: list[tuple[str, str]]) -> None:
    assert sorted(_facts(text)) == sorted(expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Round five (prompted by multiclause_heldout5.jsonl), on sentences written for this test.
        ("我舅舅以前是消防员。", [("family:舅舅", "用户的舅舅以前是消防员。")]),
        ("我去年五月从朋友家抱回了一只小狗，名字叫豆沙。", [("pet:豆沙", "用户养了一只叫豆沙的小狗。")]),
        ("我都半年没喝可乐了。", [("food:可乐", "用户不再喝可乐。")]),
        ("我前年就把酒戒了。", [("habit:喝酒", "用户不再喝酒。")]),
        ("不过我自己更喜欢狗。", [("pref:狗", "用户喜欢狗。")]),
        (
            "I adopted a kitten in June, her name is Pebble.",
            [("pet:pebble", "User adopted a kitten named Pebble.")],
        ),
        ("I moved to Lisbon in 2021.", [("profile:city", "User moved to Lisbon.")]),
        ("I haven't touched a cigarette since college.", [("habit:smoke", "User no longer smokes.")]),
        ("I quit drinking cold turkey.", [("habit:drink", "User no longer drinks alcohol.")]),
        (
            "We've got a bearded dragon named Ziggy.",
            [("pet:ziggy", "User got a bearded dragon named Ziggy.")],
        ),
    ],
)
def test_family_round_five(text: str, expected: list[tuple[str, str]]) -> None:
    assert sorted(_facts(text)) == sorted(expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Issue 25, pass three. A workplace that names no place is no workplace.
        ("我在这家公司干了十年了。", []),
        ("我在财务部工作，在同一个单位干了八年。", [("profile:workplace", "用户在财务部工作。")]),
        ("I've been at the same company for a decade.", []),
        # "有孩子" says no number: none is added.
        ("我有孩子，还有一只猫。", [("family:孩子", "用户有孩子。"), ("pet:猫", "用户养了一只猫。")]),
        # A definite noun that names no thing of its own points at what was said before.
        ("I love the ending of the show.", []),
        ("I like the rhythm of the language, it's so musical.", []),
        # A lone 哈 can end a word; a reason after a diet is why, not what.
        ("我有一只二哈。", [("pet:二哈", "用户养了一只二哈。")]),
        (
            "I've been dairy-free since May because of my stomach.",
            [("food:dairy-free", "User has been dairy-free since May.")],
        ),
    ],
)
def test_precision_floor_pass_three(text: str, expected: list[tuple[str, str]]) -> None:
    assert sorted(_facts(text)) == sorted(expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Issue 25, pass three, the classes the observations slice showed (our own sentences).
        # "me" inside "me-time" is no pronoun.
        (
            "I carve out some me-time every evening.",
            [("habit:carve_out_some_me-time", "User carves out some me-time every evening.")],
        ),
        # "such as" opens the list it names.
        (
            "I love outdoor activities such as kayaking, archery, and chess.",
            [
                (
                    "pref:outdoor_activities_such_as_kayaking",
                    "User loves outdoor activities such as kayaking.",
                ),
                ("pref:archery", "User loves archery."),
                ("pref:chess", "User loves chess."),
            ],
        ),
        # Two parts of the day, and "once or twice", are one frequency each.
        (
            "I walk my dogs every morning and evening.",
            [("habit:walk_my_dogs", "User walks their dogs every morning and evening.")],
        ),
        (
            "I visit my grandparents once or twice a month.",
            [("habit:visit_my_grandparents", "User visits their grandparents once or twice a month.")],
        ),
        # The adverb of a second verb is not the first verb's; that verb is another statement.
        (
            "I adore cooking curries and often try new spice blends.",
            [("pref:cooking_curries", "User adores cooking curries.")],
        ),
        # A narrowing after a comma is no item of the list.
        ("I enjoy painting, particularly with watercolors.", [("pref:painting", "User enjoys painting.")]),
        # "and still life" is a noun, not an adverb of a second verb.
        (
            "I love drawing portraits and still life.",
            [("pref:drawing_portraits_and_still_life", "User loves drawing portraits and still life.")],
        ),
    ],
)
def test_wording_stays_whole_pass_three(text: str, expected: list[tuple[str, str]]) -> None:
    assert sorted(_facts(text)) == sorted(expected)

"""The phrase matcher: normalisation, token boundaries, negation, quoting, typos, linear time."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from otelsignals.signals.matching import (
    PhraseGroup,
    PhraseMatcher,
    clause_snippet,
    interior_one_edit,
    snippet,
)
from otelsignals.signals.phrase_analysis import phrase_library
from otelsignals.signals.tokens import _UNIFY, normalise, tokenise, unify

GROUPS = (
    PhraseGroup("gratitude", ("thanks", "thank you", "much appreciated"), exclude=("thanks to",)),
    PhraseGroup("escalation", ("get me a human", "speak to a manager", "escalate this")),
    PhraseGroup("confirmation", ("^perfect$", "got it now")),
    PhraseGroup("correction", ("not what i asked", "that's wrong"), negation=False),
    PhraseGroup("clarification", ("what do you mean",), whole_message=("huh",)),
    PhraseGroup("rephrase", ("in other words",), starts_with=("again:",)),
)


@pytest.fixture(scope="module")
def matcher() -> PhraseMatcher:
    return PhraseMatcher(GROUPS, protected_words=("leasing", "think"))


def groups(matcher: PhraseMatcher, text: str, *, accepted: bool = True) -> list[str]:
    return [m.group for m in matcher.find(text) if not accepted or not (m.negated or m.quoted)]


# --- normalisation and tokens ----------------------------------------------------------------------


def test_unify_keeps_length_and_plain_characters() -> None:
    text = "It\u2019s \u201cdone\u201d \u2014 really\u2026"
    assert unify(text) == 'It\'s "done" - really.'
    assert len(unify(text)) == len(text)


@pytest.mark.parametrize(
    ("text", "unified"),
    [
        ("\u2018a\u2019 \u201ab\u201b \u02bcc\u00b4 d\u2032", "'a' 'b' 'c' d'"),
        ("\u201ca\u201d \u201eb\u201f \u00abc\u00bb d\u2033", '"a" "b" "c" d"'),
        ("a\u2010b\u2011c\u2012d\u2013e\u2014f\u2015g\u2212h", "a-b-c-d-e-f-g-h"),
        ("a\u00a0b\u2007c\u2009d\u200ae\u202ff", "a b c d e f"),
        ("wait\u2026", "wait."),
        ("\u2019\u2019 a\u2019b\u2019 \u2014\u2014", "'' a'b' --"),  # every occurrence
        # near misses: other non-ASCII characters stay as they are
        (
            "caf\u00e9 \u00fcber \u00df \u2192 \u2022 \u2018\U0001f44d",
            "caf\u00e9 \u00fcber \u00df \u2192 \u2022 '\U0001f44d",
        ),
        ("\u3002\uff01\uff1f\uff0c\u3001 \u00b7 \u2033\u2034", '.!?,, \u00b7 "\u2034'),  # full-width marks
        ("\u300c\u300d \uff5e", "\u300c\u300d \uff5e"),  # other full-width characters stay
        ("plain ASCII, untouched.", "plain ASCII, untouched."),
    ],
)
def test_unify_maps_each_fancy_character_and_only_those(text: str, unified: str) -> None:
    assert unify(text) == unified


# Mostly the mapped characters, several times over, among others (plain, accented, symbols, emoji).
@given(
    st.text(
        alphabet=st.one_of(st.sampled_from([*_UNIFY, "a", "\u00e9", " ", "\u2192"]), st.characters()),
        max_size=60,
    )
)
def test_unify_is_a_one_to_one_character_translation(text: str) -> None:
    assert unify(text) == text.translate(str.maketrans(_UNIFY))


def test_normalise_casefolds_and_drops_apostrophes_and_punctuation() -> None:
    assert normalise("Don\u2019t   SHOUT,\nplease!!  It's fine.") == "dont shout please its fine"


def test_tokens_keep_original_spans() -> None:
    text = "Well\u2014THANK you!"
    tokens = tokenise(text)
    assert [t.norm for t in tokens] == ["well", "thank", "you"]
    assert [text[t.start : t.end] for t in tokens] == ["Well", "THANK", "you"]


def test_sentence_and_clause_flags() -> None:
    tokens = tokenise("no. thanks, really\nok")
    assert [(t.norm, t.sentence_start, t.clause_start) for t in tokens] == [
        ("no", True, True),
        ("thanks", True, True),
        ("really", False, True),
        ("ok", True, True),
    ]


# --- matching --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("thanks", ["gratitude"]),
        ("THANKS!!!", ["gratitude"]),
        ("Thank-you", ["gratitude"]),
        ("thank\tyou", ["gratitude"]),
        ("Thanksgiving is next week", []),
        ("thankful", []),
        ("I'm thanking you", []),
        ("Much appreciated.", ["gratitude"]),
    ],
)
def test_phrases_match_whole_tokens_in_any_case_or_punctuation(
    matcher: PhraseMatcher, text: str, expected: list[str]
) -> None:
    assert groups(matcher, text) == expected


def test_match_reports_group_phrase_and_original_span(matcher: PhraseMatcher) -> None:
    text = "Ok \u2014 please, GET ME A   HUMAN!"
    (match,) = matcher.find(text)
    assert (match.group, match.phrase) == ("escalation", "get me a human")
    assert text[match.start : match.end] == "GET ME A   HUMAN"


def test_overlapping_phrases_are_all_reported(matcher: PhraseMatcher) -> None:
    text = "thank you, thanks, much appreciated"
    assert [text[m.start : m.end] for m in matcher.find(text)] == ["thank you", "thanks", "much appreciated"]


def test_exclude_vetoes_overlapping_hits_of_its_group(matcher: PhraseMatcher) -> None:
    assert groups(matcher, "Thanks to the rain my flight is late") == []
    assert groups(matcher, "Thanks! The rain is over") == ["gratitude"]


@pytest.mark.parametrize(
    ("text", "fires"),
    [
        ("Perfect!", True),
        ("perfect, thanks", False),  # gratitude fires, confirmation too: checked below
        ("Find the perfect gift", False),
        ("Perfect competition is a model", False),
        ("ok. Perfect.", True),
    ],
)
def test_anchored_phrases_need_clause_boundaries(matcher: PhraseMatcher, text: str, fires: bool) -> None:
    found = "confirmation" in groups(matcher, text)
    assert found is (fires or text == "perfect, thanks")


@pytest.mark.parametrize(
    ("text", "group", "fires"),
    [
        ("I always forget. It happens to everyone.", "quit", False),  # no "forget it" across a full stop
        ("forget it, I'll do it myself", "quit", True),
        ("I quit. My patience is gone.", "quit", True),  # nor the exclude "i quit my"
        ("I quit my job last year", "quit", False),
        ("Yes please!! 🙏", "gratitude", False),  # an emoji goes with its sentence: "please 🙏" excludes
    ],
)
def test_a_phrase_is_read_within_one_sentence(text: str, group: str, fires: bool) -> None:
    found = {m.group for m in phrase_library().matcher.find(text) if not (m.negated or m.quoted)}
    assert (group in found) is fires


def test_whole_message_entries_fire_only_alone(matcher: PhraseMatcher) -> None:
    assert groups(matcher, "huh?") == ["clarification"]
    assert groups(matcher, "  Huh ?! ") == ["clarification"]
    assert groups(matcher, "huh, that is interesting") == []


def test_starts_with_entries_are_message_prefixes(matcher: PhraseMatcher) -> None:
    text = "  Again: where is my parcel?"
    (match,) = matcher.find(text)
    assert match.group == "rephrase" and text[match.start : match.end] == "Again:"
    assert groups(matcher, "I asked again: where is my parcel?") == []


# --- negation --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "negated"),
    [
        ("no thanks", True),
        ("I don't need to speak to a manager", True),  # dont · need · to → within 3 tokens
        ("Please don't escalate this", True),
        ("I do not want you to escalate this", False),  # "not" is 4 tokens back
        ("never thanks anyone", True),
        ("without thanks", True),
        ("Not sure I should say thanks", False),  # 4 tokens back: out of the window
        ("No problem, thanks!", False),  # a comma closes the negation's scope
        ("No. Thanks!", False),  # so does a sentence boundary
        ("Isn\u2019t it great? thanks", False),
        ("Thanks, not needed", False),  # negators after the phrase do not count
    ],
)
def test_negation_window(matcher: PhraseMatcher, text: str, negated: bool) -> None:
    (match,) = [m for m in matcher.find(text) if m.group in ("gratitude", "escalation")]
    assert match.negated is negated


def test_groups_can_ignore_negation(matcher: PhraseMatcher) -> None:
    (match,) = matcher.find("No, that's not what I asked")
    assert match.group == "correction" and not match.negated
    (match,) = matcher.find("I don't think that's wrong")
    assert match.group == "correction" and not match.negated  # the group opted out: data decides


@pytest.mark.parametrize(
    ("text", "negated"),
    [
        ("I need my phone working again", True),  # a goal
        ("hoping that fixed it", True),
        ("I don't need help, it's working again", False),  # another clause
        ("I needed a reboot and then it was working again", False),  # beyond the window
        ("it's working again", False),
    ],
)
def test_wanting_words_negate_only_groups_of_outcomes(text: str, negated: bool) -> None:
    groups = [
        PhraseGroup("outcome", ("working again", "that fixed it"), unless_wanted=True),
        PhraseGroup("plain", ("working again", "that fixed it")),
    ]
    matcher = PhraseMatcher(groups, wanting=("need", "hoping"))
    found = {m.group: m.negated for m in matcher.find(text)}
    assert found == {"outcome": negated, "plain": False}


# --- quoting ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        '"get me a human" is what he wrote',
        "He said \u201cget me a human\u201d and left",
        "He said 'get me a human' and left",
        "He said \u2018get me a human\u2019 and left",
        "Can you answer this?\n> get me a human\n> now",
        "Reply to this for me.\n\nOn Mon, 3 Jun 2024 at 10:00, Bob <bob@x.io> wrote:\nplease get me a human",
        "-----Original Message-----\nget me a human",
        "Run `get me a human` in the shell",
        "Logs:\n```\nget me a human\n```\nwhat is this?",
    ],
)
def test_quoted_hits_are_flagged(matcher: PhraseMatcher, text: str) -> None:
    (match,) = matcher.find(text)
    assert match.group == "escalation" and match.quoted


@pytest.mark.parametrize(
    "text",
    [
        "Don't wait, get me a human",  # an apostrophe inside a word is no quote
        "The users' files are gone, get me a human",  # an unopened closing quote
        'He said "no" - get me a human',
        "> that was the old text\nget me a human",  # only the '>' line is quoted
        'A 27" monitor? get me a human',  # an unpaired double quote quotes nothing
    ],
)
def test_unquoted_hits_are_not_flagged(matcher: PhraseMatcher, text: str) -> None:
    (match,) = matcher.find(text)
    assert not match.quoted


# --- typos -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "phrase"),
    [
        ("thnak you", "thank you"),  # transposition
        ("thanks, much apreciated", "much appreciated"),  # deletion
        ("much appreciatted", "much appreciated"),  # insertion
        ("much apprexiated", "much appreciated"),  # substitution
        ("please escalte this", "escalate this"),
        ("I want to speak to a manger", "speak to a manager"),
    ],
)
def test_one_interior_edit_typos_match_fuzzily(matcher: PhraseMatcher, text: str, phrase: str) -> None:
    fuzzy = [m for m in matcher.find(text) if m.phrase == phrase]
    assert fuzzy and fuzzy[0].fuzzy


@pytest.mark.parametrize(
    ("text", "typo"),
    [
        ("speak to a mannager", True),  # interior insertion
        ("much apprecated tho", True),  # interior deletion
        ("THNAK YOU!", True),  # typo and case
        ("thank yuo", False),  # "you" has 3 letters: exact only
    ],
)
def test_more_typos(matcher: PhraseMatcher, text: str, typo: bool) -> None:
    assert any(m.fuzzy for m in matcher.find(text)) is typo


@pytest.mark.parametrize(
    ("text", "phrase"),
    [
        ("yay thank youuu", "thank you"),  # a stretched word of 5+ letters, short once unstretched
        ("thaaank you", "thank you"),
        ("muuuch appreciated", "much appreciated"),
        ("thank youuuuuuu!!", "thank you"),
        ("thank yooou", "thank you"),
    ],
)
def test_stretched_words_match_fuzzily(matcher: PhraseMatcher, text: str, phrase: str) -> None:
    assert [m.fuzzy for m in matcher.find(text) if m.phrase == phrase] == [True]


@pytest.mark.parametrize("text", ["thank yuuu", "zzzzz", "thank youu", "nooooo way"])
def test_runs_that_stretch_no_phrase_word_do_not_match(matcher: PhraseMatcher, text: str) -> None:
    """Read as one letter or two, the run must give a phrase word exactly: "yuuu" gives "yu" or "yuu";
    "youu" has no run of three, and "you" is too short to be reached by a typo."""
    assert [m.phrase for m in matcher.find(text)] == []


@pytest.mark.parametrize(
    "text",
    [
        "thsnk",  # corrected to "thank", which alone is no phrase here
        "thx you",  # short words are exact
        "speak to a managers",  # an end edit is an inflection, not a typo
        "escalaet this",  # the last letter changed: not interior
        "escalatte this",  # insertion next to... still interior: see below
        "I think you",  # a protected real word is never "thank"
        "I'm leasing a manager",  # protected
        "hscalate this",  # the first letter changed
    ],
)
def test_non_typos_do_not_match(matcher: PhraseMatcher, text: str) -> None:
    found = [m.phrase for m in matcher.find(text) if m.fuzzy]
    assert found == (["escalate this"] if text == "escalatte this" else [])


@pytest.mark.parametrize(
    ("word", "target", "expected"),
    [
        ("thnak", "thank", True),
        ("manger", "manager", True),
        ("escalte", "escalate", True),
        ("thabk", "thank", True),
        ("humans", "human", False),  # end insertion
        ("fixes", "fixed", False),  # last letter
        ("works", "forks", False),  # first letter
        ("thank", "thank", False),  # no edit
        ("thnka", "thank", False),  # two edits
    ],
)
def test_interior_one_edit(word: str, target: str, expected: bool) -> None:
    assert interior_one_edit(word, target) is expected
    assert interior_one_edit(target, word) is expected


# --- linear time -----------------------------------------------------------------------------------


def _work(matcher: PhraseMatcher, text: str) -> tuple[int, int, int]:
    scan = matcher.scan(text)
    return scan.candidates, scan.corrections, len(scan.tokens)


@pytest.mark.parametrize(
    "unit",
    [
        "thanks thank you much appreciated get me a human ",  # every token starts a phrase
        "thanksgiving appreciatxd escalatez managerial lorem ipsum ",  # near misses and typo look-ups
        "!!!??? \"quoted 'text' here\" > `code` ",  # punctuation and quotes only
        "a" * 997 + " ",  # long tokens
    ],
)
def test_100kb_messages_take_linear_work(matcher: PhraseMatcher, unit: str) -> None:
    small = unit * (10_000 // len(unit) + 1)
    large = unit * (100_000 // len(unit) + 1)
    assert len(large) >= 100_000
    candidates, corrections, tokens = _work(matcher, large)
    assert candidates <= len(large) and corrections <= tokens
    assert candidates <= 4 * tokens  # bounded by the phrase set, not by the text
    small_work = _work(matcher, small)
    ratio = len(large) / len(small)
    assert candidates <= ratio * 1.1 * max(small_work[0], 1)
    assert tokens <= ratio * 1.1 * max(small_work[2], 1)


def test_100kb_message_hits_are_all_found(matcher: PhraseMatcher) -> None:
    text = ("lorem ipsum dolor sit amet " * 4000) + "please get me a human"
    assert len(text) > 100_000
    (match,) = matcher.find(text)
    assert text[match.start : match.end] == "get me a human"


# --- snippets --------------------------------------------------------------------------------------


def test_snippet_is_the_sentence_around_the_match() -> None:
    text = "Hello there. I want to speak to a manager right now! Bye."
    start = text.index("speak")
    assert (
        snippet(text, start, start + len("speak to a manager")) == "I want to speak to a manager right now!"
    )


def test_snippet_is_bounded() -> None:
    text = "x" * 5000 + " get me a human " + "y" * 5000
    start = text.index("get")
    cut = snippet(text, start, start + 14)
    assert len(cut) <= 200 and "get me a human" in cut
    assert len(snippet("z" * 1000, 0, 1000)) == 200


# --- wildcards ------------------------------------------------------------------------------------

WILDCARD_GROUP = PhraseGroup(
    "w", ("you keep *ing", "i can * now$", "^i said *$"), exclude=("can you keep", "i said hi")
)


@pytest.mark.parametrize(
    "text",
    ["You keep suggesting the same hotel.", "why do you keep ASKING", "I can print now", "I said slim"],
)
def test_wildcard_phrases_fire(text: str) -> None:
    assert [m.group for m in PhraseMatcher([WILDCARD_GROUP]).find(text)] == ["w"]


@pytest.mark.parametrize(
    "text",
    [
        "you keep it",  # "*ing" needs a token ending in -ing
        "you keep",  # nothing after the head
        "you keep sing",  # too short to be a verb form
        "can you keep looking?",  # excluded
        "I can print now or later",  # "$": the clause goes on
        "can I print now?",
        "I can now print",
        "I said hi",  # excluded
        "she said slim",
        "I said slim fit jeans",  # longer than one word
    ],
)
def test_wildcard_near_misses(text: str) -> None:
    assert PhraseMatcher([WILDCARD_GROUP]).find(text) == []


def test_a_phrase_cannot_start_with_a_wildcard() -> None:
    with pytest.raises(ValueError, match="starts with a wildcard"):
        PhraseMatcher([PhraseGroup("w", ("*ing now",))])


# --- emoji words -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "norms"),
    [
        ("👍", ["thumbsup"]),
        ("ok 👍🏻 thanks", ["ok", "thumbsup", "thanks"]),  # the skin-tone modifier is dropped
        ("great👍thanks", ["great", "thumbsup", "thanks"]),  # split out of a word
        ("looks good👌", ["looks", "good", "okhand"]),
        ("🙄 again 😡", ["again"]),  # other emoji are boundaries, as before
        ("it says verified ✅ thx", ["it", "says", "verified", "checkmark", "thx"]),
        ("it work 🎉 gracias", ["it", "work", "partypopper", "gracias"]),
        ("done ✔️", ["done", "checkmark"]),  # the variation selector is dropped
    ],
)
def test_reply_emoji_are_tokens(text: str, norms: list[str]) -> None:
    tokens = tokenise(text)
    assert [t.norm for t in tokens] == norms
    for token in tokens:
        if token.norm in ("thumbsup", "okhand"):
            assert text[token.start : token.end] in ("👍", "👌") and token.clause_start


def test_chinese_and_japanese_characters_are_tokens_of_their_own() -> None:
    """Written without spaces between words, a run of kana or ideographs is one token per character,
    so a phrase is found inside the run ("谢谢" in "谢谢你的帮助"); Korean, written with spaces, and
    accented Latin words stay whole."""
    tokens = tokenise("谢谢你的帮助! José 감사합니다")
    assert [t.norm for t in tokens] == ["谢", "谢", "你", "的", "帮", "助", "josé", "감사합니다"]
    assert [(t.start, t.end) for t in tokens[:2]] == [(0, 1), (1, 2)]
    assert tokens[0].sentence_start and not tokens[1].sentence_start
    matcher = PhraseMatcher([PhraseGroup("thanks", ("谢谢", "ありがとう"))])
    assert [m.phrase for m in matcher.find("谢谢你的帮助")] == ["谢谢"]
    assert [m.phrase for m in matcher.find("ありがとうございます")] == ["ありがとう"]
    assert matcher.find("谢你") == []


def test_a_closing_mark_ends_the_clause_before_it() -> None:
    """A report closed by ✅ or 🎉 ends there: "it work$" fires on "it work 🎉 muchas gracias", where
    an emoji that is only a word boundary would leave "muchas" in the clause."""
    matcher = PhraseMatcher([PhraseGroup("done", ("^it work$",))])
    assert [m.phrase for m in matcher.find("now it appear in my orders, it work 🎉 muchas gracias")] == [
        "^it work$"
    ]
    assert matcher.find("it work 😡 muchas gracias") == []


def test_emoji_phrase_matches_only_the_emoji() -> None:
    matcher = PhraseMatcher([PhraseGroup("ok", ("👍",), exclude=("👍 but",))])
    assert [m.phrase for m in matcher.find("done 👍")] == ["👍"]
    assert matcher.find("👍 but the total is wrong") == []
    assert matcher.find("thumbs up") == []


# --- lead-in and trailer words around anchors ------------------------------------------------------

ANCHORED = PhraseGroup("a", ("^great$", "^never mind$", "went through$"))


@pytest.fixture(scope="module")
def anchored() -> PhraseMatcher:
    return PhraseMatcher(
        [ANCHORED], lead_ins=("ok", "yeah", "ah"), trailers=("thanks", "thank you", "mate", "ty")
    )


@pytest.mark.parametrize(
    "text",
    [
        "great",
        "ok great, thank you",  # a lead-in before "^"
        "ok yeah great",  # two lead-ins
        "awesome. great thanks",  # a trailer after "$"
        "great thank you mate",  # a two-word trailer and a one-word one
        "ah never mind",
        "the payment went through ty",
    ],
)
def test_lead_ins_and_trailers_keep_the_clause(anchored: PhraseMatcher, text: str) -> None:
    assert [m.group for m in anchored.find(text)] == ["a"]


@pytest.mark.parametrize(
    "text",
    [
        "oh great, now it's broken",  # not a lead-in
        "ok ok yeah great",  # three lead-ins: more than MAX_LEAD_INS
        "that's a great idea",
        "great thanks for nothing",  # "for" is no trailer
        "great thank you thank you",  # four trailer words: more than MAX_TRAILERS
        "never mind the typo",
        "it went through the wall thanks",
        "great thank. you",  # a two-word trailer does not cross a boundary, and "thank" alone is none
    ],
)
def test_lead_ins_and_trailers_near_misses(anchored: PhraseMatcher, text: str) -> None:
    assert anchored.find(text) == []


def test_without_lead_ins_or_trailers_anchors_are_strict() -> None:
    strict = PhraseMatcher([ANCHORED])
    assert strict.find("ok great") == []
    assert strict.find("great thanks") == []
    assert [m.group for m in strict.find("ok, great!")] == ["a"]


@pytest.mark.parametrize(
    ("text", "matched", "expected"),
    [
        ("Let me speak to a human agent. Now.", "Let me speak to", "Let me speak to a human agent"),
        ("Forget it, get me a human!!", "Forget it", "Forget it"),  # the clause ends at the comma
        ("ok. get me a human", "get me a human", "get me a human"),  # nothing left to add
        ("I want to talk to " + "someone " * 20, "I want to talk to", "I want to talk to " + "someone " * 7),
    ],
)
def test_clause_snippet_is_the_match_and_the_rest_of_its_clause(text: str, matched: str, expected: str):
    start = text.index(matched)
    assert clause_snippet(text, start, start + len(matched)) == expected.strip()


# --- a second matcher on a scanned text ------------------------------------------------------------


def test_rescan_of_another_matchers_scan_is_its_own_scan(matcher: PhraseMatcher) -> None:
    """The interaction library's cue matcher reads the phrase scan's tokens instead of tokenising
    the message again: the result must be a fresh scan's, on every library example."""
    library = phrase_library()
    assert library.cues is not None
    texts = [text for spec in library.groups.values() for text in (*spec.positives, *spec.near_misses)]
    texts += [text for examples in library.cue_examples.values() for text in (*examples[0], *examples[1])]
    for text in texts:
        scanned = library.matcher.scan(text)
        assert library.cues.rescan(scanned) == library.cues.scan(text), text
        assert matcher.rescan(scanned) == matcher.scan(text), text

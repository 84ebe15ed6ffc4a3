"""Sentences held like snippets: each sentence that a test declares it holds (`@pytest.mark.holds`)
is still on its page as written, and the testing appendix lists exactly the declared ones."""

from __future__ import annotations

import pytest

from support.held_sentences import LIST, Held, declarations, listing, missing_from_pages

pytestmark = pytest.mark.fast  # the test tier: see the testing page


def test_every_held_sentence_is_on_its_page_as_written():
    held = declarations()
    assert held, "no test declares a sentence it holds"
    problems = missing_from_pages(held)
    assert not problems, "reword the declaration with the page, or the page back:\n" + "\n".join(problems)


def test_a_reworded_sentence_is_caught():
    """The check itself: line breaks and spacing aside, a sentence with one word changed is reported."""
    real = declarations()[0]
    respaced = Held(real.page, real.sentence.replace(" ", "\n  "), real.test)
    reworded = Held(real.page, "Reworded " + real.sentence.split(" ", 1)[1], real.test)
    assert missing_from_pages([real, respaced]) == [] and len(missing_from_pages([reworded])) == 1


def test_the_appendix_lists_every_held_sentence_and_its_test(request):
    expected = listing(declarations())
    if request.config.getoption("--update-outputs"):
        LIST.write_text(expected)
    assert LIST.read_text() == expected, (
        f"{LIST.name} differs from the tests' holds marks: pytest tests/test_held_sentences.py --update-outputs"
    )

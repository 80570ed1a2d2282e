"""The stub's utterance table (tests/stub_utterances.py), one case per test, in-process
against the real database. Known failures are xfail(strict=True): fixing one fails the run
until its mark is removed.

Each case runs on a fixed weekday (the table's cases take the seven in turn), so a case
that names "wednesday" passes or fails the same whatever day the suite runs; questions
about what is due today or overdue keep the real clock, the database's."""

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.stub_utterances import CASES, Case, run_case


def _param(index: int, case: Case) -> object:
    marks = (
        [pytest.mark.xfail(strict=True, reason=case.known_failure)] if case.known_failure else []
    )
    weekday = None if case.kind == "question" else index % 7
    return pytest.param(case, weekday, id=case.id, marks=marks)


def test_the_table_is_large_and_mostly_understood() -> None:
    assert len(CASES) >= 200
    assert sum(1 for case in CASES if case.known_failure) <= len(CASES) // 20


@pytest.mark.parametrize(("case", "weekday"), [_param(i, case) for i, case in enumerate(CASES)])
async def test_utterance_has_its_expected_effect(
    engine: AsyncEngine, case: Case, weekday: int | None
) -> None:
    outcome = await run_case(engine, case, user="sam", weekday=weekday)

    assert outcome.ok, outcome.why

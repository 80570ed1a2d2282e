"""The stub's utterance table (tests/stub_utterances.py), one case per test, in-process
against the real database. Known failures are xfail(strict=True): fixing one fails the run
until its mark is removed."""

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.stub_utterances import CASES, Case, run_case


def _param(case: Case) -> object:
    marks = (
        [pytest.mark.xfail(strict=True, reason=case.known_failure)] if case.known_failure else []
    )
    return pytest.param(case, id=case.id, marks=marks)


def test_the_table_is_large_and_mostly_understood() -> None:
    assert len(CASES) >= 200
    assert sum(1 for case in CASES if case.known_failure) <= len(CASES) // 20


@pytest.mark.parametrize("case", [_param(case) for case in CASES])
async def test_utterance_has_its_expected_effect(engine: AsyncEngine, case: Case) -> None:
    outcome = await run_case(engine, case, user="sam")

    assert outcome.ok, outcome.why

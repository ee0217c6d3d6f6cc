"""The mutation run's mutants still name code that exists: each snippet is found exactly once in its file and each
names test files that exist, so a module that moves or changes fails here, in the suite, rather than when the
mutation run (minutes of CPU, outside the suite) is next started."""

from __future__ import annotations

from tests.mutation.run_mutants import MUTANTS, PROJECT, check_snippets


def test_every_mutant_snippet_is_found_exactly_once_in_its_file():
    assert check_snippets(MUTANTS, PROJECT) == []


def test_every_mutant_names_test_files_that_exist():
    missing = sorted({t for mutant in MUTANTS for t in mutant.tests if not (PROJECT / t.split("::")[0]).is_file()})
    assert not missing, f"mutants name test files that are gone: {missing}"

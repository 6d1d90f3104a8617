"""Test cases the supervisor's tests run in a real worker process (not collected by
``unittest discover``: the file name does not start with ``test``).

``HANG_CASES_MARK``: a file path; test_b hangs when it does not exist yet (and creates it),
passes when it does. ``HANG_CASES_ALWAYS``: the tests (letters: ``b``, ``abc``) that hang
every time.
"""

from __future__ import annotations

import os
import time
import unittest


class Cases(unittest.TestCase):
    def test_a(self) -> None:
        hang_if_told('a')

    def test_b(self) -> None:
        hang_if_told('b')
        mark = os.environ['HANG_CASES_MARK']
        if not os.path.exists(mark):
            open(mark, 'w').close()
            hang()

    def test_c(self) -> None:
        hang_if_told('c')
        self.assertEqual(os.environ.get('HANG_CASES_FAIL_C'), None, 'told to fail')


def hang() -> None:
    time.sleep(120)   # "hung": the supervisor must stop it long before


def hang_if_told(letter: str) -> None:
    if letter in os.environ.get('HANG_CASES_ALWAYS', ''):
        hang()

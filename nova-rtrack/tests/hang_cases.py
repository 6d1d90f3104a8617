"""Test cases the supervisor's tests run in a real worker process (not collected by
``unittest discover``: the file name does not start with ``test``).

``HANG_CASES_MARK``: a file path; test_b hangs when it does not exist yet (and creates it),
passes when it does. ``HANG_CASES_ALWAYS=1``: test_b hangs every time.
"""

from __future__ import annotations

import os
import time
import unittest


class Cases(unittest.TestCase):
    def test_a(self) -> None:
        pass

    def test_b(self) -> None:
        mark = os.environ['HANG_CASES_MARK']
        if os.environ.get('HANG_CASES_ALWAYS') == '1' or not os.path.exists(mark):
            open(mark, 'w').close()
            time.sleep(120)   # "hung": the supervisor must stop it long before

    def test_c(self) -> None:
        self.assertEqual(os.environ.get('HANG_CASES_FAIL_C'), None, 'told to fail')

"""The test harness: Nova's functional tests with each fake compute host backed by its own
rtrackd (not used in production).

- :mod:`.hook`: the post-import hook that puts the drop-in tracker in place, serves the
  Placement fixture's application on a loopback port and follows the current test.
- :mod:`.sysfs`: a sysfs/procfs tree generated from the virt driver's view of the fake host.
- :mod:`.launcher`: one rtrackd per (test, host): configuration derived from nova.conf, spawn,
  readiness, refresh, stop in the test's cleanup.
"""

"""Claim objects with the shape of Nova's (``nova.compute.claims``), holding rtrackd's answer.

The decision was made by rtrackd before the object exists; the object only carries it to the
compute manager (``claimed_numa_topology``, ``migration``, ``flavor``, ``image_meta``) and
undoes it when the operation does not go on (``__exit__`` with an exception, or ``abort()``).
"""

from __future__ import annotations

from typing import Any, Optional

from oslo_log import log as logging

from nova.compute import claims as nova_claims
from nova import objects

LOG = logging.getLogger(__name__)


def numa_from_answer(answer: dict[str, Any]) -> Optional['objects.InstanceNUMATopology']:
    prim = answer.get('numa_topology')
    if not prim:
        return None
    return objects.InstanceNUMATopology.obj_from_primitive(prim)


class RtrackClaim(nova_claims.NopClaim):
    """An instance claim rtrackd granted (Nova's ``Claim``)."""

    def __init__(self, context: Any, instance: 'objects.Instance', nodename: str,
                 tracker: Any, answer: dict[str, Any],
                 migration: Optional['objects.Migration'] = None) -> None:
        super().__init__(migration=migration)
        self.instance = instance.obj_clone()
        self.instance_ref = instance
        self.nodename = nodename
        self.tracker = tracker
        self.context = context
        self.answer = answer
        self.claimed_numa_topology = numa_from_answer(answer)

    @property
    def numa_topology(self) -> Any:
        return self.instance.numa_topology

    def abort(self) -> None:
        LOG.debug('Aborting claim: %s', self, instance=self.instance)
        self.tracker.abort_instance_claim(self.context, self.instance_ref, self.nodename)


class RtrackMoveClaim(RtrackClaim):
    """A move claim rtrackd granted at the destination (Nova's ``MoveClaim``)."""

    def __init__(self, context: Any, instance: 'objects.Instance', nodename: str,
                 flavor: 'objects.Flavor', image_meta: Any, tracker: Any,
                 answer: dict[str, Any], migration: 'objects.Migration') -> None:
        self.flavor = flavor
        if isinstance(image_meta, dict):
            image_meta = objects.ImageMeta.from_dict(image_meta)
        self.image_meta = image_meta
        super().__init__(context, instance, nodename, tracker, answer, migration=migration)

    @property
    def numa_topology(self) -> Any:
        from nova.virt import hardware
        return hardware.numa_get_constraints(self.flavor, self.image_meta)

    def abort(self) -> None:
        LOG.debug('Aborting claim: %s', self, instance=self.instance)
        # As Nova's MoveClaim: through the tracker's drop_move_claim (tests patch it on the
        # class), then the instance's migration context goes.
        self.tracker.drop_move_claim(self.context, self.instance, self.nodename,
                                     flavor=self.flavor)
        self.instance.drop_migration_context()

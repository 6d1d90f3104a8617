"""``nova-compute-rtrack``: nova-compute with rtrackd as its resource tracker.

Exactly ``nova-compute`` (same arguments, same configuration files), with
``nova.compute.resource_tracker.ResourceTracker`` replaced by the drop-in before the compute
manager is built. nova.conf's ``[rtrack]`` group says where rtrackd's socket is and which
rtrack.toml to check: a disagreement on a shared option stops the service at start, naming
the option.
"""

from __future__ import annotations

import os
import sys
import tempfile
from typing import Any, Optional


def install() -> None:
    """Puts the drop-in in place (import order: nova.cmd's monkey patching first)."""
    from nova.compute import resource_tracker

    from nova_rtrack import tracker

    from nova_rtrack import driver_patches
    driver_patches.install_manager()
    try:
        driver_patches.install()
    except ImportError:  # pragma: no cover (a compute without the libvirt driver)
        pass
    if resource_tracker.ResourceTracker is not tracker.RtrackResourceTracker:
        resource_tracker.NovaResourceTracker = resource_tracker.ResourceTracker
        resource_tracker.ResourceTracker = tracker.RtrackResourceTracker


def switch_over_config(conf: Any, compute_id_file: Optional[str]) -> dict[str, Any]:
    """rtrack.toml for a host nova-compute runs on: every key nova.conf shares, the compute
    node's uuid (Nova's ``compute_id`` file, so that rtrackd takes over nova-compute's
    provider), and the two keys nova-compute on rtrack needs (the virt driver writes the
    hypervisor traits, the scheduler the allocations)."""
    from nova_rtrack import conf as rt_conf

    uuid = None
    if compute_id_file and os.path.exists(compute_id_file):
        with open(compute_id_file, encoding='utf-8') as f:
            uuid = f.read().strip() or None
    data = rt_conf.derive(conf, compute_node_uuid=uuid)
    placement = data.setdefault('placement', {})
    placement['hypervisor_traits'] = 'nova-compute'
    placement['report_allocations'] = False
    return data


def write_private(path: str, text: str) -> None:
    """Writes ``text`` to ``path`` atomically, readable by owner and group only (it may hold
    nova.conf's Placement credentials)."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix='.rtrack.toml.', dir=directory)
    try:
        os.fchmod(fd, 0o640)
        with os.fdopen(fd, 'w', encoding='utf-8') as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def config_main(argv: Optional[list[str]] = None) -> int:
    """``nova-rtrack-config --output FILE [--compute-id FILE] [nova options]``: writes the
    rtrack.toml nova.conf implies (mode 0640: it may hold credentials). Prints the sections
    written, never their values."""
    import nova.conf

    from nova_rtrack import conf as rt_conf

    args = list(sys.argv[1:] if argv is None else argv)
    output, compute_id = None, None
    rest: list[str] = []
    it = iter(args)
    for a in it:
        if a == '--output':
            output = next(it, None)
        elif a == '--compute-id':
            compute_id = next(it, None)
        else:
            rest.append(a)
    if not output:
        print('nova-rtrack-config: --output FILE is needed (the file may hold credentials; '
              'it is written 0640, never printed)', file=sys.stderr)
        return 2
    conf = nova.conf.CONF
    conf(rest, project='nova')
    rt_conf.register_opts(conf)
    # keystoneauth registers its plugin's options ([placement] username, password, ...) only
    # when it loads the plugin: register them so that they are read.
    from keystoneauth1 import loading as ks_loading
    if conf.placement.auth_type:
        conf.register_opts(ks_loading.get_auth_plugin_conf_options(conf.placement.auth_type),
                           group='placement')
    if compute_id is None:
        compute_id = os.path.join(conf.state_path, 'compute_id')
    data = switch_over_config(conf, compute_id)
    write_private(output, rt_conf.dumps_toml(data))
    uuid = data.get('host', {}).get('compute_node_uuid')
    print('wrote %s: sections %s; compute node uuid %s' % (
        output, ', '.join(sorted(data)), uuid or '(none: rtrackd finds the provider by name)'))
    return 0


def main() -> None:
    # nova.cmd.compute imports nova.cmd, which applies eventlet's monkey patching (or the
    # threading mode) before anything else of Nova is imported.
    from nova.cmd import compute

    install()
    compute.main()


if __name__ == '__main__':
    sys.exit(main())

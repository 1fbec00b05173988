"""free_port never names one port twice in a process, even before anything binds the ports it gave."""

from shoal.devstack.procs import free_port


def test_ports_handed_out_unbound_are_never_handed_out_again():
    # 600 picks from the ~17k ports below the ephemeral range: without the record, a repeat is near certain
    ports = [free_port() for _ in range(600)]
    assert len(set(ports)) == len(ports)

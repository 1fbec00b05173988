"""make_snapshot orders pods and PodGroups exactly by (namespace, name[, uid]), whatever the characters."""

from operator import attrgetter

from hypothesis import given
from hypothesis import strategies as st

from shoal.core.model import Pod, PodGroup, make_snapshot

TEXT = st.text(alphabet=st.sampled_from(["a", "b", "-", "/", ".", "\0", "é"]), max_size=4)


@given(st.lists(st.tuples(TEXT, TEXT, TEXT), max_size=30))
def test_pods_and_groups_sort_as_their_tuples(keys):
    pods = [Pod(uid=u, namespace=ns, name=n) for ns, n, u in keys]
    groups = [PodGroup(namespace=ns, name=n) for ns, n, _ in keys]
    snapshot = make_snapshot(pods=pods, pod_groups=groups)
    assert [attrgetter("namespace", "name", "uid")(p) for p in snapshot.pods] == \
        sorted(attrgetter("namespace", "name", "uid")(p) for p in pods)
    assert [(g.namespace, g.name) for g in snapshot.pod_groups] == sorted((g.namespace, g.name) for g in groups)

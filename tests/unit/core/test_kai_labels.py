"""The shared-GPU label layout, written and read only by shoal.core.kai_labels (KAI's binder writes it so)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from shoal.core.kai_labels import GPU_GROUP_LABEL, gpu_group_labels, gpu_groups_of, is_gpu_group_label

group_ids = st.text(alphabet="abcdef0123456789-", min_size=1, max_size=12)
other_labels = st.dictionaries(st.sampled_from(["app", "kai.scheduler/queue", "runai-gpu", "team"]),
                               st.text(max_size=8), max_size=3)


@given(st.lists(group_ids, min_size=1, max_size=4, unique=True), other_labels)
def test_what_is_written_reads_back_as_the_sorted_groups_among_other_labels(groups, others):
    labels = {**others, **gpu_group_labels(groups)}
    assert gpu_groups_of(labels) == tuple(sorted(groups))
    assert {k for k in labels if is_gpu_group_label(k)} == set(gpu_group_labels(groups))


def test_kai_layout_one_device_and_several():
    assert gpu_group_labels(("g1",)) == {GPU_GROUP_LABEL: "g1"}
    assert gpu_group_labels(("g1", "g2")) == {f"{GPU_GROUP_LABEL}/g1": "g1", f"{GPU_GROUP_LABEL}/g2": "g2"}
    assert gpu_group_labels(()) == {}


def test_empty_values_and_look_alike_keys():
    assert gpu_groups_of({GPU_GROUP_LABEL: ""}) == ()
    assert gpu_groups_of({f"{GPU_GROUP_LABEL}/g3": ""}) == ("g3",)  # a prefixed label names its group
    assert gpu_groups_of({"runai-gpu-groups": "x", "app": "y"}) == ()
    assert not is_gpu_group_label("runai-gpu-groups")

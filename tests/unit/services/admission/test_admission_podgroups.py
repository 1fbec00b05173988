"""The PodGroup webhook: a running semi-preemptible PodGroup's minimum may shrink, never grow (KAI v0.18)."""

from __future__ import annotations

import pytest

from services.admission.podgroups import validate_update
from tests.unit.services.admission.test_admission_handlers import client, post, review


def podgroup(spec: dict, *, started: bool = True, core: tuple[str, ...] = ()) -> dict:
    meta: dict = {"name": "pg", "namespace": "ns"}
    if started:
        meta["annotations"] = {"kai.scheduler/last-start-timestamp": "2026-12-01T10:00:00Z"}
    status = {"schedulingState": {"corePods": list(core)}} if core else {}
    return {"metadata": meta, "spec": {"preemptibility": "semi-preemptible", "queue": "q", **spec}, "status": status}


def tree(min_subgroup=None, workers=2) -> dict:
    spec: dict = {"subGroups": [{"name": "leader", "minMember": 1}, {"name": "workers", "minMember": workers}]}
    if min_subgroup is not None:
        spec["minSubGroup"] = min_subgroup
    return spec


def test_raising_min_member_of_a_running_group_is_refused_with_kais_words():
    assert validate_update(podgroup({"minMember": 2}), podgroup({"minMember": 3})) == (
        "cannot increase minMember (2 -> 3) on a semi-preemptible PodGroup: it would reclassify running elastic "
        "pods or subgroups as core")


@pytest.mark.parametrize(("old", "new"), [
    ({"minMember": 3}, {"minMember": 2}),  # lowering widens the surplus
    ({"minMember": 2}, {"minMember": 2}),
    ({"minMember": 2}, {}),  # unset is 1
])
def test_lowering_or_keeping_the_minimum_is_allowed(old, new):
    assert validate_update(podgroup(old), podgroup(new)) is None


def test_unset_counts_as_the_value_the_scheduler_applies():
    # unset minMember is 1: setting it to 2 raises it
    assert "minMember (1 -> 2)" in validate_update(podgroup({}), podgroup({"minMember": 2}))
    # unset minSubGroup is every child (2): 1 is lower, unsetting a 1 again raises it to 2
    assert validate_update(podgroup(tree()), podgroup(tree(min_subgroup=1))) is None
    assert "minSubGroup (1 -> 2)" in validate_update(podgroup(tree(min_subgroup=1)), podgroup(tree()))


def test_a_subgroup_is_matched_by_name():
    denial = validate_update(podgroup(tree(min_subgroup=1)), podgroup(tree(min_subgroup=1, workers=3)))
    assert denial == ('cannot increase minMember (2 -> 3) on subgroup "workers" of a semi-preemptible PodGroup: '
                      "it would reclassify running elastic pods or subgroups as core")
    added = tree(min_subgroup=1)
    added["subGroups"].append({"name": "extra", "minMember": 8})
    assert validate_update(podgroup(tree(min_subgroup=1)), podgroup(added)) is None


def test_only_running_semi_preemptible_groups_are_guarded():
    assert validate_update(podgroup({"minMember": 2}, started=False), podgroup({"minMember": 5})) is None
    running = podgroup({"minMember": 2}, started=False, core=("p-0", "p-1"))
    assert validate_update(running, podgroup({"minMember": 5})) is not None
    plain = podgroup({"minMember": 2})
    plain["spec"]["preemptibility"] = "preemptible"
    assert validate_update(plain, podgroup({"minMember": 5})) is None


async def test_endpoint_answers_update_reviews_only():
    c = await client()
    try:
        old, new = podgroup({"minMember": 2}), podgroup({"minMember": 4})
        denied = await post(c, "/validate-podgroups", review(new, "UPDATE", old))
        assert not denied["allowed"] and denied["status"]["message"].startswith("cannot increase minMember (2 -> 4)")
        assert (await post(c, "/validate-podgroups", review(new, "CREATE")))["allowed"]
        assert (await post(c, "/validate-podgroups", review(old, "UPDATE", new)))["allowed"]
        junk = await post(c, "/validate-podgroups", review("not an object", "UPDATE", "junk"))
        assert junk["allowed"]
    finally:
        await c.close()

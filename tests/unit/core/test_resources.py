import pytest
from hypothesis import given
from hypothesis import strategies as st

from shoal.core.resources import (
    CPU,
    GPU,
    MEMORY,
    RESOURCE_ORDER,
    UNLIMITED,
    ZERO,
    Resources,
    from_values,
    total,
)

amounts = st.integers(min_value=-(10**12), max_value=10**12)
vectors = st.builds(Resources, cpu_milli=amounts, memory_bytes=amounts, gpu_milli=amounts)


def test_canonical_order_is_cpu_memory_gpu():
    assert RESOURCE_ORDER == (CPU, MEMORY, GPU)
    r = Resources(cpu_milli=1, memory_bytes=2, gpu_milli=3)
    assert r.values() == (1, 2, 3)
    assert [r.get(name) for name in RESOURCE_ORDER] == [1, 2, 3]
    assert from_values((1, 2, 3)) == r


def test_arithmetic_is_component_wise():
    a = Resources(cpu_milli=100, memory_bytes=10**9, gpu_milli=1000)
    b = Resources(cpu_milli=50, memory_bytes=1, gpu_milli=500)
    assert a + b == Resources(cpu_milli=150, memory_bytes=10**9 + 1, gpu_milli=1500)
    assert a - b == Resources(cpu_milli=50, memory_bytes=10**9 - 1, gpu_milli=500)
    assert 3 * b == b * 3 == Resources(cpu_milli=150, memory_bytes=3, gpu_milli=1500)
    assert -b == Resources(cpu_milli=-50, memory_bytes=-1, gpu_milli=-500)
    assert a.with_value(GPU, 7) == Resources(cpu_milli=100, memory_bytes=10**9, gpu_milli=7)


def test_no_lexicographic_ordering():
    with pytest.raises(TypeError):
        _ = Resources(gpu_milli=1) < Resources(cpu_milli=1)


def test_immutable_and_hashable():
    r = Resources(gpu_milli=1)
    with pytest.raises(AttributeError):
        r.gpu_milli = 2  # type: ignore[misc]
    assert {r: 1}[Resources(gpu_milli=1)] == 1


def test_fits_in_and_bounds():
    need = Resources(cpu_milli=100, gpu_milli=1000)
    assert need.fits_in(Resources(cpu_milli=100, gpu_milli=1000))
    assert not need.fits_in(Resources(cpu_milli=99, gpu_milli=8000))
    assert not need.fits_in(Resources(cpu_milli=100, gpu_milli=UNLIMITED))
    assert need.fits_in_bounds(Resources(cpu_milli=UNLIMITED, memory_bytes=0, gpu_milli=UNLIMITED))
    assert not need.fits_in_bounds(Resources(cpu_milli=UNLIMITED, gpu_milli=999))


def test_predicates_and_min_max():
    assert ZERO.is_zero() and not ZERO.any_positive() and not ZERO.any_negative()
    r = Resources(cpu_milli=-1, gpu_milli=2)
    assert r.any_positive() and r.any_negative() and not r.is_zero()
    assert r.clamp_non_negative() == Resources(gpu_milli=2)
    assert r.maximum(ZERO) == Resources(gpu_milli=2)
    assert r.minimum(ZERO) == Resources(cpu_milli=-1)
    assert total([r, r, ZERO]) == Resources(cpu_milli=-2, gpu_milli=4)
    assert total([]) == ZERO


@given(vectors, vectors)
def test_add_sub_roundtrip(a, b):
    assert (a + b) - b == a
    assert a + b == b + a
    assert (a - b) + b == a


@given(vectors, vectors)
def test_fits_in_matches_componentwise(a, b):
    assert a.fits_in(b) == all(x <= y for x, y in zip(a.values(), b.values(), strict=True))
    assert a.maximum(b).values() == tuple(max(x, y) for x, y in zip(a.values(), b.values(), strict=True))

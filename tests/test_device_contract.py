"""The device contract (``traxfs.volume.contract.DeviceContract``): every kind of device the
layers above are handed implements all of it, with the contract's signatures, and the calls
work; and no code above asks a device whether it has one of the contract's calls."""

from __future__ import annotations

import ast
import inspect
import itertools
from contextlib import ExitStack
from pathlib import Path

import pytest
from conftest import MiB

from traxfs.volume.contract import DeviceContract
from traxfs.volume.device import BlockDevice, ImageFileDevice, create_image
from traxfs.volume.disk.profiles import atlas10k3, scaled
from traxfs.volume.group import VolumeGroup
from traxfs.volume.overlay import OverlayDevice
from traxfs.volume.powerloss import PowerLossDevice
from traxfs.volume.simdevice import create_simulated

pytestmark = pytest.mark.timeout(60)
ROOT = Path(__file__).resolve().parent.parent
DATA = ("path", "size", "block_size")
METHODS = {name: inspect.signature(fn) for name, fn in vars(DeviceContract).items()
           if not name.startswith("_") and callable(fn)}


def _shape(sig: inspect.Signature) -> list[tuple[str, object, object]]:
    """Parameter names, kinds and defaults (not annotations), ``self`` left out."""
    return [(p.name, p.kind, p.default) for p in sig.parameters.values() if p.name != "self"]


def test_the_contract_lists_what_the_engine_and_the_data_path_call():
    assert {"read", "readinto", "write", "writev", "flush", "write_durable", "direct_sync_fd", "refuse_direct",
            "read_copies", "repair_copy", "boundaries", "equivalent", "read_batch", "locate",
            "close"} == set(METHODS)


def _image(tmp_path: Path, stack) -> ImageFileDevice:
    return stack(create_image(str(tmp_path / "plain.img"), 8 * MiB))


def _simulated(tmp_path: Path, stack):
    return stack(create_simulated(str(tmp_path / "sim.img"), scaled(atlas10k3(), 10)))


def _volume(mirror: bool):
    def make(tmp_path: Path, stack, registry, make_pvs):
        paths = make_pvs(2, size=32 * MiB)
        VolumeGroup.create(registry, "cvg", paths, extent_size=MiB)
        vg = stack(VolumeGroup.open(registry, "cvg"))  # closes the volume too
        vg.create_lv("clv", 8 * MiB, "striped", mirror=mirror, **({} if mirror else {"stripes": 2,
                                                                                    "stripe_unit": 64 * 1024}))
        return vg.open_lv("clv")
    return make


def _overlay(tmp_path: Path, stack):
    return OverlayDevice(_image(tmp_path, stack))


def _power_loss(tmp_path: Path, stack):
    return PowerLossDevice(_image(tmp_path, stack))


KINDS = {"image file": _image, "simulated disk": _simulated, "logical volume": _volume(False),
         "mirrored logical volume": _volume(True), "overlay": _overlay, "power-loss wrapper": _power_loss}


@pytest.fixture
def stack():
    """``stack(x)``: enter the context of ``x`` (a device, an open volume group) and leave it
    after the test (closing it)."""
    with ExitStack() as s:
        yield s.enter_context


def check_contract(dev) -> None:
    """``dev`` keeps the contract: the members exist, the methods have the contract's
    signatures, and each call does what it says."""
    assert isinstance(dev, DeviceContract)
    assert isinstance(dev.path, str) and dev.path
    assert isinstance(dev.size, int) and dev.size >= 64 * 1024
    assert isinstance(dev.block_size, int) and dev.block_size >= 512 and dev.block_size % 512 == 0
    for name, sig in METHODS.items():
        method = getattr(dev, name)
        assert callable(method), name
        assert _shape(inspect.signature(method)) == _shape(sig), f"{type(dev).__name__}.{name}"
    data = bytes(range(256)) * 16
    dev.write(0, data)
    assert dev.read(0, len(data)) == data
    dev.writev(8192, [memoryview(data)[:1000], memoryview(data)[1000:]])
    parts = [bytearray(100), bytearray(len(data) - 100)]
    dev.readinto(8192, [memoryview(p) for p in parts])
    assert b"".join(parts) == data
    dev.write_durable(16384, data[::-1])
    assert dev.read(16384, len(data)) == data[::-1]
    dev.flush()
    copies = dev.read_copies(0, len(data))
    assert copies and all(copy == data for _, copy in copies)
    dev.repair_copy(copies[-1][0], 0, data)
    assert dev.read(0, len(data)) == data
    first, count = dev.boundaries(7)
    assert first <= 7 < first + count
    eq = dev.equivalent(7)
    assert 7 in eq and list(eq) == sorted(eq)
    assert dev.read_batch([(16384, 100), (0, 50), (8192, 0)]) == [data[::-1][:100], data[:50], b""]
    pieces = dev.locate(0, len(data))  # every copy's pieces cover the range once
    for copy in {c for c, *_ in pieces}:
        mine = sorted((within, n) for c, _, _, n, within in pieces if c == copy)
        assert [w for w, _ in mine] == list(itertools.accumulate([0] + [n for _, n in mine[:-1]]))
        assert sum(n for _, n in mine) == len(data)
    fd = dev.direct_sync_fd()
    assert fd is None or isinstance(fd, int)
    dev.refuse_direct()
    assert dev.direct_sync_fd() is None  # refused once: not offered again


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_kind_of_device_keeps_the_contract(kind, tmp_path, stack, request):
    make = KINDS[kind]
    extra = [request.getfixturevalue(f) for f in ("registry", "make_pvs")] if "volume" in kind else []
    check_contract(make(tmp_path, stack, *extra))


def test_a_mirror_holds_a_copy_per_leg(tmp_path, stack, registry, make_pvs):
    lv = _volume(True)(tmp_path, stack, registry, make_pvs)
    lv.write(0, b"x" * 4096)
    assert [leg for leg, _ in lv.read_copies(0, 4096)] == [0, 1]


def test_a_block_device_keeps_the_contract(tmp_path, stack, loop_attach):
    image = create_image(str(tmp_path / "loop.img"), 8 * MiB)
    image.close()
    check_contract(stack(BlockDevice(loop_attach(image.path))))


def test_a_single_device_refuses_a_copy_it_does_not_have(tmp_path, stack):
    from traxfs.volume.errors import DeviceError

    dev = _image(tmp_path, stack)
    with pytest.raises(DeviceError, match="no copy 1"):
        dev.repair_copy(1, 0, b"x" * 512)


def _contract_probes(path: Path) -> list[str]:
    """``getattr(x, "<a contract member>", ...)`` calls in a source file: asking a device
    whether it has a call the contract guarantees."""
    names = set(METHODS) | set(DATA)
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr") \
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value in names:
            out.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.func.id}(..., {node.args[1].value!r})")
    return out


def test_nothing_asks_a_device_whether_it_keeps_the_contract():
    probes = [p for folder in ("fs", "volume") for f in sorted((ROOT / folder).rglob("*.py"))
              for p in _contract_probes(f)]
    assert probes == []

"""Labels and volume-group metadata copies: damage is detected, the good copy is used, and the
errors name the device (SPEC §2 Metadata, §6 bad input changes nothing)."""

from __future__ import annotations

import copy
import os
import shutil

import crc32c
import pytest
from conftest import MiB, flip_byte, head_hash, read_at, slot_offset, write_at

from traxfs.volume import label as label_mod
from traxfs.volume.device import create_image
from traxfs.volume.errors import (
    ForeignDeviceError,
    MetadataError,
    MissingDeviceError,
    StaleDeviceError,
)
from traxfs.volume.group import VolumeGroup, list_groups
from traxfs.volume.label import LABEL_OFFSETS, read_label
from traxfs.volume.metadata_area import HEADER_SIZE, encode, write_slots
from traxfs.volume.model import VolumeGroupMeta
from traxfs.volume.scan import scan_one

MDA_BYTES = 2 * 512 * 1024  # both slots


def make_group(registry, make_pvs, n=2, name="vg", lvs=(("data", 3 * MiB),)):
    paths = make_pvs(n, size=16 * MiB)
    VolumeGroup.create(registry, name, paths, extent_size=MiB)
    with VolumeGroup.open(registry, name) as vg:
        for lv_name, size in lvs:
            vg.create_lv(lv_name, size)
            olv = vg.open_lv(lv_name)
            olv.write(0, lv_name.encode() * (size // len(lv_name) // 4))
            olv.flush()
    return paths


def lv_bytes(registry, name, lv="data", n=4096, **kw) -> bytes:
    with VolumeGroup.open(registry, name, **kw) as vg:
        return vg.open_lv(lv).read(0, n)


def text_length(path: str, slot: int) -> int:
    raw = read_at(path, slot_offset(slot), HEADER_SIZE)
    return int.from_bytes(raw[20:24], "little")  # magic 8, version 4, seq 8, length 4


def seq_of(registry, name) -> int:
    return list_groups(registry)[name].seq


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


# ----- one damaged copy: the other one is used ------------------------------------------------------

@pytest.mark.parametrize("slot", [0, 1])
@pytest.mark.parametrize("where", ["magic", "header", "text-start", "text-end"])
def test_damaged_metadata_copy_falls_back_to_the_other(registry, make_pvs, slot, where):
    paths = make_group(registry, make_pvs)
    expected = lv_bytes(registry, "vg")
    seq = seq_of(registry, "vg")
    victim = paths[1]
    n = text_length(victim, slot)
    at = {"magic": 0, "header": 12, "text-start": HEADER_SIZE, "text-end": HEADER_SIZE + n - 1}[where]
    flip_byte(victim, slot_offset(slot) + at)

    with VolumeGroup.open(registry, "vg") as vg:
        assert vg.meta.seq == seq
        assert [lv.name for lv in vg.meta.lvs] == ["data"]
        assert vg.open_lv("data").read(0, 4096) == expected
        joined = "\n".join(vg.warnings)
        assert victim in joined and f"metadata copy {slot}" in joined, vg.warnings
        repaired = vg.repair()
        assert any(victim in r for r in repaired)
    with VolumeGroup.open(registry, "vg") as vg:  # rewritten: no warning any more
        assert vg.warnings == []
        assert vg.meta.seq == seq + 1


def test_damaged_label_copy_0_uses_copy_1(registry, make_pvs):
    paths = make_group(registry, make_pvs)
    expected = lv_bytes(registry, "vg")
    victim = paths[0]
    sd = scan_one(victim)
    good = read_label(sd.device)
    sd.close()
    flip_byte(victim, LABEL_OFFSETS[0] + 30)  # inside the PV uuid: only the checksum notices
    sd = scan_one(victim)
    try:
        assert sd.label == good, "label copy 1 should have been used"
    finally:
        sd.close()
    assert lv_bytes(registry, "vg") == expected
    with VolumeGroup.open(registry, "vg", repair=True) as vg:  # reported, then rewritten by repair
        assert any(f"{victim} label copy 0" in w and "checksum" in w for w in vg.warnings)
        vg.repair()
    with VolumeGroup.open(registry, "vg") as vg:
        assert vg.warnings == []
    sd = scan_one(victim)
    try:
        assert sd.label == good and sd.label_problems == []
    finally:
        sd.close()
    flip_byte(victim, LABEL_OFFSETS[0] + 30)  # damage copy 0 again for what follows

    # both label copies damaged: the device cannot be identified; the error names it and why
    flip_byte(victim, LABEL_OFFSETS[1] + 30)
    sd = scan_one(victim)
    try:
        assert sd.label is None
        assert f"{victim} label copy 0" in sd.error and f"{victim} label copy 1" in sd.error
        assert "checksum" in sd.error
    finally:
        sd.close()
    before = head_hash(victim)
    with pytest.raises(MissingDeviceError) as e:
        VolumeGroup.open(registry, "vg").__enter__()
    assert victim in str(e.value)
    assert "label checksum mismatch" in str(e.value), "the error should say the device's label is damaged"
    assert head_hash(victim) == before


def test_label_of_another_format_version_is_named(registry, make_pvs):
    (path,) = make_pvs(1, size=8 * MiB)
    raw = bytearray(read_at(path, 0, 512))
    raw[8] = 9  # the version field; re-checksum it, as a future writer would
    body = bytes(raw[: label_mod._FMT.size])
    raw[len(body) : len(body) + 4] = crc32c.crc32c(body).to_bytes(4, "little")
    for off in LABEL_OFFSETS:
        write_at(path, off, bytes(raw))
    sd = scan_one(path)
    try:
        assert sd.label is None and "version 9" in sd.error and path in sd.error
    finally:
        sd.close()


# ----- every copy damaged ---------------------------------------------------------------------------

@pytest.mark.parametrize("repair", [False, True])
def test_all_copies_bad_on_single_device_group_names_it_and_writes_nothing(registry, make_pvs, repair):
    (path,) = make_group(registry, make_pvs, n=1)
    for slot in (0, 1):
        flip_byte(path, slot_offset(slot) + HEADER_SIZE + 3)
    before = head_hash(path)
    with pytest.raises(MetadataError) as e:
        with VolumeGroup.open(registry, "vg", repair=repair):
            pass
    msg = str(e.value)
    assert path in msg and "metadata copy 0" in msg and "metadata copy 1" in msg, msg
    assert head_hash(path) == before, "a refused open must not write to the device"
    assert list_groups(registry) == {}


def test_all_copies_bad_on_one_device_of_two_is_named_and_repairable(registry, make_pvs):
    paths = make_group(registry, make_pvs)
    expected = lv_bytes(registry, "vg")
    victim = paths[1]
    for slot in (0, 1):
        flip_byte(victim, slot_offset(slot) + 5)
    before = [head_hash(p) for p in paths]
    with pytest.raises(StaleDeviceError) as e:
        with VolumeGroup.open(registry, "vg"):
            pass
    assert victim in str(e.value) and "damaged" in str(e.value)
    assert [head_hash(p) for p in paths] == before
    with VolumeGroup.open(registry, "vg", repair=True) as vg:
        assert any(victim in w for w in vg.warnings)
        assert victim in vg.repair()
    assert lv_bytes(registry, "vg") == expected


def test_flip_inside_a_json_value_is_caught_by_the_checksum(registry, make_pvs):
    """A flipped character that keeps the JSON valid (a hex digit of the group's uuid) is only
    visible to the text checksum: the damaged copy must still be refused."""
    (path,) = make_group(registry, make_pvs, n=1)
    vg_uuid = list_groups(registry)["vg"].uuid
    raw = read_at(path, slot_offset(0), HEADER_SIZE + text_length(path, 0))
    at = raw.index(vg_uuid.encode()) + 3
    write_at(path, slot_offset(0) + at, b"f" if raw[at : at + 1] != b"f" else b"e")
    with VolumeGroup.open(registry, "vg") as vg:
        assert vg.meta.uuid == vg_uuid  # from the intact copy 1
        assert any("metadata copy 0" in w and "checksum" in w for w in vg.warnings), vg.warnings
    for slot in (0, 1):  # with both copies so damaged the group is gone, not silently changed
        write_at(path, slot_offset(slot) + at, b"f" if raw[at : at + 1] != b"f" else b"e")
    assert list_groups(registry) == {}


# ----- torn writes and interrupted commits -----------------------------------------------------------

def test_commit_interrupted_between_slots_uses_the_newer_copy(registry, make_pvs):
    """Crash after slot 0 got sequence N+1 but before slot 1 did: both copies are intact, the
    newer one wins."""
    (path,) = make_group(registry, make_pvs, n=1)
    old_slot1 = read_at(path, slot_offset(1), 512 * 1024)
    with VolumeGroup.open(registry, "vg") as vg:
        vg.rename_lv("data", "newer")
        seq = vg.meta.seq
    write_at(path, slot_offset(1), old_slot1)
    with VolumeGroup.open(registry, "vg") as vg:
        assert vg.meta.seq == seq and [lv.name for lv in vg.meta.lvs] == ["newer"]


def test_commit_interrupted_between_devices_names_the_lagging_device(registry, make_pvs):
    paths = sorted(make_group(registry, make_pvs, n=2))  # a commit writes devices in path order
    old = read_at(paths[1], slot_offset(0), MDA_BYTES)
    with VolumeGroup.open(registry, "vg") as vg:
        vg.rename_lv("data", "newer")
    write_at(paths[1], slot_offset(0), old)  # the crash came before the second device
    with pytest.raises(StaleDeviceError, match=paths[1]):
        with VolumeGroup.open(registry, "vg"):
            pass
    with VolumeGroup.open(registry, "vg", repair=True) as vg:
        assert [lv.name for lv in vg.meta.lvs] == ["newer"]
        vg.repair()
    with VolumeGroup.open(registry, "vg") as vg:
        assert vg.warnings == [] and vg.open_lv("newer").read(0, 4) == b"data"


@pytest.mark.parametrize("torn_slot", [0, 1])
def test_torn_metadata_write_is_detected(registry, make_pvs, torn_slot):
    """Simulate a crash while a commit (sequence N+1) writes one slot: the JSON is cut off
    half-way (the rest of the slot holds the old bytes). The other slot is used."""
    (path,) = make_group(registry, make_pvs, n=1)
    with VolumeGroup.open(registry, "vg") as vg:
        seq = vg.meta.seq
        new = copy.deepcopy(vg.meta)
    new.lvs[0].name = "renamed"
    new.seq = seq + 1
    raw = encode(seq + 1, new.to_doc(), 512 * 1024, path)
    cut = HEADER_SIZE + (len(raw) - HEADER_SIZE) // 2
    if torn_slot == 0:  # slot 0 torn mid-way, slot 1 still the old copy
        write_at(path, slot_offset(0), raw[:cut])
        want_seq, want_lv = seq, "data"
    else:  # slot 0 complete, the crash came while slot 1 was written
        write_at(path, slot_offset(0), raw)
        write_at(path, slot_offset(1), raw[:cut])
        want_seq, want_lv = seq + 1, "renamed"
    with VolumeGroup.open(registry, "vg") as vg:
        assert vg.meta.seq == want_seq
        assert [lv.name for lv in vg.meta.lvs] == [want_lv]
        assert any(f"metadata copy {torn_slot}" in w and "torn" in w and path in w for w in vg.warnings), vg.warnings
        assert vg.open_lv(want_lv).read(0, 4) == b"data"


# ----- stale and missing devices ----------------------------------------------------------------------

def test_stale_device_is_named_and_repair_fixes_it(registry, make_pvs):
    paths = make_group(registry, make_pvs, n=3)
    stale = paths[2]
    old_mda = read_at(stale, slot_offset(0), MDA_BYTES)
    with VolumeGroup.open(registry, "vg") as vg:
        vg.create_lv("second", 2 * MiB)
        seq = vg.meta.seq
    write_at(stale, slot_offset(0), old_mda)  # the device "missed" that commit

    before = [head_hash(p) for p in paths]
    with pytest.raises(StaleDeviceError) as e:
        with VolumeGroup.open(registry, "vg"):
            pass
    assert stale in str(e.value) and "stale" in str(e.value)
    assert not any(p in str(e.value) for p in paths[:2])
    with pytest.raises(StaleDeviceError):  # partial does not mean "ignore stale"
        with VolumeGroup.open(registry, "vg", partial=True):
            pass
    assert [head_hash(p) for p in paths] == before, "refused opens wrote to a device"

    with VolumeGroup.open(registry, "vg", repair=True) as vg:
        assert vg.meta.seq == seq
        assert {lv.name for lv in vg.meta.lvs} == {"data", "second"}
        assert any(stale in w for w in vg.warnings)
        assert stale in vg.repair()
    with VolumeGroup.open(registry, "vg") as vg:
        assert vg.warnings == [] and vg.meta.seq == seq + 1
        assert {lv.name for lv in vg.meta.lvs} == {"data", "second"}
        assert vg.open_lv("data").read(0, 4) == b"data"


@pytest.mark.parametrize("how", ["deleted", "unregistered"])
def test_missing_device_is_named(registry, make_pvs, how):
    paths = make_group(registry, make_pvs, n=3, lvs=(("data", 2 * MiB),))
    with VolumeGroup.open(registry, "vg") as vg:
        pv_of_data = vg.meta.lv("data").legs[0].segments[0].areas[0].pv
        data_path = vg.meta.pv(pv_of_data).path
    gone = next(p for p in paths if p != data_path)
    if how == "deleted":
        os.remove(gone)
    else:
        registry.remove(gone)
    others = [p for p in paths if p != gone]
    before = [head_hash(p) for p in others]
    with pytest.raises(MissingDeviceError) as e:
        with VolumeGroup.open(registry, "vg"):
            pass
    assert gone in str(e.value)
    assert [head_hash(p) for p in others] == before
    with VolumeGroup.open(registry, "vg", partial=True) as vg:  # explicitly without it
        assert any(gone in w for w in vg.warnings)
        assert vg.open_lv("data").read(0, 4) == b"data"
        with pytest.raises(MissingDeviceError, match=gone):
            vg.rename("other")
        with pytest.raises(MissingDeviceError, match=gone):
            vg.remove(force=True)
    assert [head_hash(p) for p in others] == before


# ----- foreign devices --------------------------------------------------------------------------------

def test_device_of_another_group_is_refused_and_nothing_changes(registry, make_pvs):
    a_paths = make_group(registry, make_pvs, n=2, name="alpha")
    b_paths = make_group(registry, make_pvs, n=1, name="beta")
    (spare,) = make_pvs(1, size=16 * MiB)
    foreign = a_paths[1]
    everything = a_paths + b_paths + [spare]
    before = {p: head_hash(p) for p in everything}
    groups_before = {n: m.to_doc() for n, m in list_groups(registry).items()}
    fds = open_fds()

    with pytest.raises(ForeignDeviceError) as e:
        VolumeGroup.create(registry, "gamma", [spare, foreign], extent_size=MiB)
    assert foreign in str(e.value) and "alpha" in str(e.value)
    with VolumeGroup.open(registry, "beta") as vg:
        with pytest.raises(ForeignDeviceError) as e:
            vg.extend([spare, foreign])
        assert foreign in str(e.value) and "alpha" in str(e.value)
        assert len(vg.meta.pvs) == 1
    # a member of the same group is no new device either
    with VolumeGroup.open(registry, "alpha") as vg, pytest.raises(ForeignDeviceError, match=a_paths[0]):
        vg.extend([a_paths[0]])

    assert {p: head_hash(p) for p in everything} == before
    assert {n: m.to_doc() for n, m in list_groups(registry).items()} == groups_before
    assert open_fds() == fds, "a refused create/extend leaked open devices"


def test_foreign_metadata_under_a_member_path_is_refused(registry, make_pvs, tmp_path):
    """A device whose label says it is PV X of this group but whose metadata belongs to another
    group (e.g. a copied image) is named."""
    paths = make_group(registry, make_pvs, n=2, name="alpha")
    other = make_group(registry, make_pvs, n=1, name="beta")
    # give beta's device alpha's second PV label: same PV uuid, other group's metadata
    write_at(other[0], 0, read_at(paths[1], 0, 8192))
    os.remove(paths[1])
    with pytest.raises(ForeignDeviceError) as e:
        with VolumeGroup.open(registry, "alpha"):
            pass
    assert other[0] in str(e.value) and "beta" in str(e.value)


# ----- validation of the document -------------------------------------------------------------------

def _two_lv_doc(registry, make_pvs):
    paths = make_group(registry, make_pvs, n=1, lvs=(("a", 2 * MiB), ("b", 2 * MiB)))
    with VolumeGroup.open(registry, "vg") as vg:
        return paths[0], vg.meta.to_doc()


def _overlap(doc):
    a, b = doc["lvs"]
    b["legs"][0]["segments"][0]["areas"][0]["pe"] = a["legs"][0]["segments"][0]["areas"][0]["pe"] + 1


def _past_end(doc):
    doc["lvs"][0]["legs"][0]["segments"][0]["areas"][0]["pe"] = doc["pvs"][0]["pe_count"] - 1


def _gap(doc):
    doc["lvs"][0]["legs"][0]["segments"][0]["le"] = 1


def _unknown_pv(doc):
    doc["lvs"][0]["legs"][0]["segments"][0]["areas"][0]["pv"] = "00000000-0000-0000-0000-000000000000"


def _bad_layout(doc):
    doc["lvs"][0]["layout"] = "raid5"


def _dup_lv(doc):
    doc["lvs"][1]["name"] = doc["lvs"][0]["name"]


def _bad_state(doc):
    doc["lvs"][0]["legs"][0]["state"] = "maybe"


def _missing_key(doc):
    del doc["lvs"][0]["extents"]


def _bad_unit(doc):
    doc["lvs"][0]["stripe_unit"] = 3 * 4096  # does not divide the extent: units would straddle areas


BAD_DOCS = {
    "overlap": (_overlap, "overlap"),
    "past-end": (_past_end, "past its end"),
    "gap": (_gap, "tile"),
    "unknown-pv": (_unknown_pv, "unknown physical volume"),
    "layout": (_bad_layout, "raid5"),
    "duplicate-lv": (_dup_lv, "twice"),
    "leg-state": (_bad_state, "maybe"),
    "missing-key": (_missing_key, "extents"),
    "stripe-unit": (_bad_unit, "stripe unit 12288"),
    "stripe-unit-zero": (lambda doc: doc["lvs"][1].update(stripe_unit=0), "stripe unit 0"),
}


@pytest.mark.parametrize("case", sorted(BAD_DOCS))
def test_document_validation_rejects_crafted_docs(registry, make_pvs, case):
    path, doc = _two_lv_doc(registry, make_pvs)
    VolumeGroupMeta.from_doc(copy.deepcopy(doc), path)  # the untouched document is valid
    mutate, reason = BAD_DOCS[case]
    bad = copy.deepcopy(doc)
    mutate(bad)
    with pytest.raises(MetadataError, match=reason) as e:
        VolumeGroupMeta.from_doc(bad, path)
    assert path in str(e.value)

    # a checksummed (not damaged) but invalid copy on the device is refused, naming the device
    sd = scan_one(path)
    try:
        bad["seq"] = doc["seq"] + 1
        write_slots(sd.device, sd.label, doc["seq"] + 1, bad)
    finally:
        sd.close()
    before = head_hash(path)
    with pytest.raises(MetadataError, match=reason) as e:
        with VolumeGroup.open(registry, "vg", repair=True):
            pass
    assert path in str(e.value)
    assert head_hash(path) == before


def test_blank_device_is_named(tmp_path):
    p = str(tmp_path / "blank.img")
    create_image(p, 8 * MiB).close()
    sd = scan_one(p)
    try:
        assert sd.label is None and p in sd.error and "no label" in sd.error
    finally:
        sd.close()


def test_cloned_device_with_the_same_pv_uuid_is_refused_by_name(registry, make_pvs, tmp_path):
    paths = make_group(registry, make_pvs)
    clone = str(tmp_path / "clone.img")
    shutil.copyfile(paths[0], clone)
    registry.add(clone)
    with pytest.raises(MetadataError, match="same PV") as e:
        VolumeGroup.open(registry, "vg").__enter__()
    assert paths[0] in str(e.value) and clone in str(e.value)

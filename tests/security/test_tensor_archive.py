"""The tensors a verify worker hands back (``outputs.pt``, a ``torch.save`` zip archive) never
take more of the parent's memory than their size on disk.

``torch.load`` inflates a member that is stored compressed (deflate): a 256 KB file of zeros
became 256 MB in the parent, so a pull request's code could make the parent allocate a thousand
times what it wrote, under every byte cap. Members that share bytes (a central directory naming
one stored member's bytes for many storages) multiply the same way."""

from __future__ import annotations

import io
import struct
import zipfile
from pathlib import Path

import pytest
import torch

from graphmend.verify.compare import load_tensors

MB = 1 << 20


def _recompressed(src: Path, dst: Path) -> None:
    with zipfile.ZipFile(src) as z, zipfile.ZipFile(dst, "w") as out:
        for info in z.infolist():
            out.writestr(info.filename, z.read(info.filename), compress_type=zipfile.ZIP_DEFLATED)


def test_a_compressed_tensor_archive_is_refused_before_it_is_unpacked(tmp_path):
    torch.save({"y": torch.zeros(16 * MB, dtype=torch.uint8)}, tmp_path / "plain.pt")
    _recompressed(tmp_path / "plain.pt", tmp_path / "outputs.pt")
    assert (tmp_path / "outputs.pt").stat().st_size < MB  # the premise: 16 MB of tensor in under 1 MB
    with pytest.raises(ValueError, match="outputs.pt: member .* is compressed"):
        load_tensors(tmp_path / "outputs.pt")
    # what torch.save writes is read as before
    assert load_tensors(tmp_path / "plain.pt")["y"].numel() == 16 * MB


def _sharing_one_member(dst: Path, n: int) -> None:
    """A ``torch.save`` archive of ``n`` tensors, each a one-element view of its own 1 MB
    storage, whose central directory names the first storage's bytes for every storage: about
    1 MB on disk, ``n`` MB once loaded (``torch.load`` checks each record's size, not where it is)."""
    torch.save({f"t{i}": torch.zeros(MB, dtype=torch.uint8)[:1] for i in range(n)}, dst.with_suffix(".src"))
    with zipfile.ZipFile(dst.with_suffix(".src")) as src:
        names = src.namelist()
        first = next(name for name in names if name.endswith("/data/0"))
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as out:
            for name in names:
                if "/data/" not in name or name == first:
                    out.writestr(name, src.read(name))
    data = buf.getvalue()
    eocd = data.rindex(b"PK\x05\x06")
    count, cd_size, cd_offset = struct.unpack("<HII", data[eocd + 10: eocd + 20])
    central = data[cd_offset: cd_offset + cd_size]
    entries, i = {}, 0
    while i < len(central):
        name_len, extra_len, comment_len = struct.unpack("<HHH", central[i + 28: i + 34])
        end = i + 46 + name_len + extra_len + comment_len
        entries[central[i + 46: i + 46 + name_len].decode()] = central[i:end]
        i = end
    entry = entries[first]
    central += b"".join(entry.replace(b"/data/0", f"/data/{k}".encode()) for k in range(1, n))
    tail = bytearray(data[eocd:])
    tail[8:12] = struct.pack("<HH", count + n - 1, count + n - 1)
    tail[12:16] = struct.pack("<I", len(central))
    dst.write_bytes(data[:cd_offset] + central + bytes(tail))


def test_a_tensor_archive_naming_the_same_bytes_many_times_is_refused(tmp_path):
    _sharing_one_member(tmp_path / "outputs.pt", 8)
    size = (tmp_path / "outputs.pt").stat().st_size
    loaded = torch.load(tmp_path / "outputs.pt", weights_only=True)  # the premise: torch reads it, 8 times inflated
    assert sum(t.untyped_storage().nbytes() for t in loaded.values()) == 8 * MB > 7 * size
    with pytest.raises(ValueError, match="more than the .* bytes of the file"):
        load_tensors(tmp_path / "outputs.pt")


def test_a_file_that_is_not_a_tensor_archive_is_that_arm_s_error(tmp_path):
    (tmp_path / "outputs.pt").write_bytes(b"\x80\x02}q\x00.")  # a bare pickle, not torch.save's archive
    with pytest.raises(ValueError, match="outputs.pt: not a tensor file \\(not a zip archive"):
        load_tensors(tmp_path / "outputs.pt")

"""Crops PNG screenshots to their first rows (the README's copies show one screen, not the
whole page), with the standard library only: PNG filters look at most one row up, so the
first N filtered rows stay valid as they are.

    python3 tests/browser/png_crop.py MAX_HEIGHT SRC DST
"""

import struct
import sys
import zlib

SIGNATURE = b"\x89PNG\r\n\x1a\n"
CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}


def chunk(kind, body):
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)


def crop(max_height, src, dst):
    data = open(src, "rb").read()
    assert data[:8] == SIGNATURE, f"{src} is not a PNG"
    pos, chunks, idat = 8, [], b""
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + n]
        pos += 12 + n
        if kind == b"IDAT":
            idat += body
        else:
            chunks.append((kind, body))
    width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", chunks[0][1])
    if height <= max_height or interlace:
        open(dst, "wb").write(data)
        return
    stride = 1 + (width * CHANNELS[color] * depth + 7) // 8
    rows = zlib.decompress(idat)[: stride * max_height]
    out = SIGNATURE
    for kind, body in chunks:
        if kind == b"IHDR":
            body = struct.pack(">II", width, max_height) + body[8:]
        if kind == b"IEND":
            out += chunk(b"IDAT", zlib.compress(rows, 9))
        out += chunk(kind, body)
    open(dst, "wb").write(out)


if __name__ == "__main__":
    crop(int(sys.argv[1]), sys.argv[2], sys.argv[3])

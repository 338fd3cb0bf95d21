"""Small real PDF files written by hand for the web chat's attachment tests (no PDF
library): pages of Helvetica text, a page with no text layer (as a scan is), and a
document encrypted under a user password. Each is a valid PDF 1.4 file: numbered
objects, a cross-reference table with their byte offsets, a trailer."""

from __future__ import annotations

FONT = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>"


def literal(text: str) -> bytes:
    """`text` as a PDF literal string (Latin-1, its parentheses and backslashes escaped)."""
    escaped = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
    return b"(" + escaped.encode("latin-1") + b")"


def stream(content: bytes) -> bytes:
    return b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream"


def text_content(lines: list[str]) -> bytes:
    """A content stream writing `lines` down the page, one under another."""
    shown = b"".join(literal(line) + b" Tj 0 -16 Td " for line in lines)
    return b"BT /F1 12 Tf 72 720 Td " + shown + b"ET"


def document(pages: list[bytes], *, trailer: bytes = b"") -> bytes:
    """A PDF of `pages` (each its content stream), with `trailer`'s entries added."""
    count = len(pages)
    first_page = 4
    kids = b" ".join(b"%d 0 R" % (first_page + 2 * i) for i in range(count))
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>",
               b"<< /Type /Pages /Kids [" + kids + b"] /Count %d >>" % count, FONT]
    for index, content in enumerate(pages):
        objects.append(b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
                       b"/Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>"
                       % (first_page + 2 * index + 1))
        objects.append(stream(content))
    return assemble(objects, trailer)


def assemble(objects: list[bytes], trailer: bytes = b"") -> bytes:
    """Objects 1..n, the cross-reference table of their offsets, and the trailer."""
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    table = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += (b"trailer\n<< /Size %d /Root 1 0 R " % (len(objects) + 1) + trailer
            + b">>\nstartxref\n%d\n%%%%EOF\n" % table)
    return bytes(out)


def text_pdf(*pages: list[str]) -> bytes:
    """A PDF whose pages show these lines of text."""
    return document([text_content(lines) for lines in pages])


def scanned_pdf() -> bytes:
    """A page that only paints (a grey box where a scan's picture would be): no text."""
    return document([b"0.5 g 72 72 468 648 re f"])


def encrypted_pdf() -> bytes:
    """A page under the standard security handler (RC4, revision 2) whose user password
    is not empty: no reader opens it without the password."""
    encrypt = (b"/Encrypt << /Filter /Standard /V 1 /R 2 /Length 40 /P -4 /O <" + b"11" * 32
               + b"> /U <" + b"22" * 32 + b"> >> /ID [<" + b"ab" * 16 + b"> <" + b"ab" * 16
               + b">] ")
    return document([text_content(["Locked away."])], trailer=encrypt)

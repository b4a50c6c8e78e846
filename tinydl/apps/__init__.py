"""Applications built on tinydl, each also a `tinydl` subcommand.

- `superres`: ESPCN ×2/×3 super-resolution of images and videos (`tinydl superres`).
- `ocr`: PP-OCRv4 text lines of images, as RapidOCR reads them (`tinydl ocr`).
"""

"""Incremental detokenization (vLLM's / TGI's prefix-offset scheme): a request's text grows by
decoding only a small window of its newest tokens, not its whole output, every token.

Two offsets into the output ids: ``prefix_offset`` <= ``read_offset``. The text of ``ids[:read]``
is settled (``settled``); every update decodes ``ids[prefix:n]`` and ``ids[prefix:read]`` and takes
the difference as the unsettled ``tail``, so the window's first tokens give the new ones their
context (a SentencePiece word's leading space, a multi-byte character split over byte tokens).
When the window's text does not end in a partial character (U+FFFD) and extends the prefix's text,
it settles: ``prefix, read = read, n``. ``text = settled + tail`` is the full decode of the output
(the engine searches stop strings in it and streams it, holding back a trailing partial
character as before).

Work per token is bounded: a window holds the last settled chunk plus the unsettled tokens, and
after `MAX_UNSETTLED` unsettled tokens (a long run of partial characters) the part that can no
longer change is settled by force (a UTF-8 character spans at most 4 byte tokens).
"""

from __future__ import annotations

REPLACEMENT = "\ufffd"
#: unsettled tokens after which the window settles all but the last few by force
MAX_UNSETTLED = 8
#: tokens a character can still be waiting for (a UTF-8 character is at most 4 bytes)
_OPEN_TAIL = 3


class IncrementalDetokenizer:
    """The text of a growing token list, decoded a window at a time (see the module docstring).

    Args:
        tokenizer: has ``decode(ids, skip_special_tokens=...)``.
        skip_special_tokens: passed to every decode.

    >>> class Chars:  # one character per id
    ...     def decode(self, ids, skip_special_tokens=True):
    ...         return "".join(chr(96 + i) for i in ids)
    >>> d = IncrementalDetokenizer(Chars())
    >>> ids = []
    >>> for t in (1, 2, 3):
    ...     ids.append(t)
    ...     _ = d.update(ids)
    >>> d.text, d.prefix_offset, d.read_offset
    ('abc', 2, 3)
    """

    def __init__(self, tokenizer, skip_special_tokens: bool = True):
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.prefix_offset = 0
        self.read_offset = 0
        self.settled = ""
        self.tail = ""
        self._prefix_text = ""  # decode(ids[prefix_offset:read_offset])
        #: tokens passed to ``decode`` so far (the work the detokenizer did)
        self.decoded_tokens = 0

    @property
    def text(self) -> str:
        return self.settled + self.tail

    def _decode(self, ids) -> str:
        self.decoded_tokens += len(ids)
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens)

    def update(self, ids, n: int | None = None) -> str:
        """Take ``ids[:n]`` (default all) as the output so far (it only grows) and return `text`."""
        n = len(ids) if n is None else n
        if n <= self.read_offset:
            self.tail = ""
            return self.text
        window = self._decode(ids[self.prefix_offset : n])
        if not window.startswith(self._prefix_text):
            # this tokenizer's decode is not prefix-stable here (SentencePiece and byte-level BPE
            # are): start over from token 0, which is exact (the whole output, once)
            self.settled, self.prefix_offset, self.read_offset, self._prefix_text = "", 0, 0, ""
            window = self._decode(ids[:n])
        prefix = self._prefix_text
        if not window.endswith(REPLACEMENT):
            self._settle(window[len(prefix) :], n, ids)
        elif n - self.read_offset > MAX_UNSETTLED:
            self._force(ids, n, window)
        else:
            self.tail = window[len(prefix) :]
        return self.text

    def _settle(self, new: str, upto: int, ids) -> None:
        self.settled += new
        self.tail = ""
        self.prefix_offset, self.read_offset = self.read_offset, upto
        self._prefix_text = self._decode(ids[self.prefix_offset : self.read_offset])

    def _force(self, ids, n: int, window: str) -> None:
        """Settle the part of the window later tokens cannot change: the text up to a split point
        at least `_OPEN_TAIL` tokens back (a character still waiting for bytes started after it)
        that is a prefix of the window's text (the split is between two characters)."""
        prefix = self._prefix_text
        for s in range(n - _OPEN_TAIL, max(self.read_offset, n - _OPEN_TAIL - 4), -1):
            part = self._decode(ids[self.prefix_offset : s])
            if window.startswith(part) and len(part) >= len(prefix):
                self._settle(part[len(prefix) :], s, ids)
                window = self._decode(ids[self.prefix_offset : n])
                self.tail = window[len(self._prefix_text) :]
                return
        self.tail = window[len(prefix) :]

    def finish(self, ids, n: int | None = None) -> str:
        """The final text of ``ids[:n]``: everything settles (a trailing partial character stays)."""
        self.update(ids, n)
        self.settled += self.tail
        self.tail = ""
        return self.settled

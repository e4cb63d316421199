import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { ChunkWalker } from '../src/proxy/chunked.js';

/** Walks `bytes` delivered in the given pieces; returns the end offset in the whole stream, or -1. */
function walkPieces(bytes: Buffer, cuts: number[]): { end: number; bad: boolean; dataBytes: number } {
  const w = new ChunkWalker();
  w.reset();
  const points = [0, ...[...new Set(cuts)].filter((c) => c > 0 && c < bytes.length).sort((a, b) => a - b), bytes.length];
  for (let k = 0; k + 1 < points.length; k++) {
    const piece = bytes.subarray(points[k], points[k + 1]);
    const e = w.walk(piece, 0);
    if (w.bad) return { end: -1, bad: true, dataBytes: w.dataBytes };
    if (e >= 0) return { end: points[k]! + e, bad: false, dataBytes: w.dataBytes };
  }
  return { end: -1, bad: false, dataBytes: w.dataBytes };
}

const chunkedBody = fc.record({
  chunks: fc.array(fc.uint8Array({ minLength: 1, maxLength: 40 }), { maxLength: 6 }),
  upper: fc.boolean(),
  ext: fc.option(fc.constantFrom(';a=b', ';x', ' ;q="1"'), { nil: undefined }),
  trailers: fc.array(fc.constantFrom('x-t: 1', 'checksum: abc'), { maxLength: 2 }),
});

function encode(b: { chunks: Uint8Array[]; upper: boolean; ext: string | undefined; trailers: string[] }): { bytes: Buffer; data: number } {
  const parts: Buffer[] = [];
  let data = 0;
  for (const c of b.chunks) {
    const size = c.length.toString(16);
    parts.push(Buffer.from(`${b.upper ? size.toUpperCase() : size}${b.ext ?? ''}\r\n`, 'latin1'), Buffer.from(c), Buffer.from('\r\n'));
    data += c.length;
  }
  parts.push(Buffer.from(`0\r\n${b.trailers.map((t) => `${t}\r\n`).join('')}\r\n`, 'latin1'));
  return { bytes: Buffer.concat(parts), data };
}

test('the end of a chunked body is found exactly, whatever the pieces it arrives in', () => {
  fc.assert(
    fc.property(chunkedBody, fc.uint8Array({ maxLength: 8 }), fc.array(fc.nat(400), { maxLength: 6 }), (body, after, cuts) => {
      const { bytes, data } = encode(body);
      // Bytes of the next message follow the body: the walker must stop at the body's end.
      const stream = Buffer.concat([bytes, Buffer.from(after)]);
      const r = walkPieces(stream, cuts);
      assert.equal(r.bad, false);
      assert.equal(r.end, bytes.length);
      assert.equal(r.dataBytes, data);
    }),
    { numRuns: 300 },
  );
});

test('split at every byte, one byte at a time, a chunked body still ends where it ends', () => {
  const { bytes } = encode({ chunks: [Buffer.from('hello'), Buffer.alloc(17, 0x0d), Buffer.from('\r\n0\r\n\r\n')], upper: true, ext: ';x=1', trailers: ['t: 1'] });
  for (let cut = 1; cut < bytes.length; cut++) assert.equal(walkPieces(bytes, [cut]).end, bytes.length, `cut at ${cut}`);
  assert.equal(walkPieces(bytes, Array.from({ length: bytes.length }, (_, i) => i)).end, bytes.length);
});

test('malformed framing is refused, never read past', () => {
  for (const bad of [
    'x\r\nab\r\n0\r\n\r\n', // not hex
    '\r\n', // no size digits
    '2\nab\r\n0\r\n\r\n', // bare LF after the size
    '2\r\nabc\r\n0\r\n\r\n', // data longer than the size
    '2\r\nab\n0\r\n\r\n', // bare LF after the data
    '0\r\nx-t: 1\n\r\n', // bare LF in a trailer
    '0\r\n\rx\r\n\r\n', // lone CR in a trailer
    'fffffffffffffff\r\n', // absurd size
  ]) {
    const r = walkPieces(Buffer.from(bad, 'latin1'), []);
    assert.equal(r.bad, true, JSON.stringify(bad));
  }
  const incomplete = walkPieces(Buffer.from('5\r\nhel', 'latin1'), []);
  assert.deepEqual([incomplete.bad, incomplete.end], [false, -1], 'an incomplete body goes on');
});

test('extensions of token bytes and field-line trailers pass; what llhttp refuses there is refused', () => {
  const walk = (s: string) => {
    const w = new ChunkWalker();
    const end = w.walk(Buffer.from(s, 'latin1'), 0);
    return w.bad ? 'bad' : end;
  };
  const ok = '1;a=b;c="d"\r\nx\r\n0\r\nX-Sum: abc\r\n\r\n';
  assert.equal(walk(ok + 'GET /next'), ok.length);
  for (const s of ['1;a=b c\r\nx\r\n0\r\n\r\n', '1;a\x01\r\nx\r\n0\r\n\r\n', '0\r\nBad Trailer: x\r\n\r\n', '0\r\nno-colon\r\n\r\n', '0\r\n: x\r\n\r\n', '0\r\nTransfer-Encoding: chunked\r\n\r\n', '0\r\ncontent-LENGTH: 1\r\n\r\n', '0\r\nX: a\x01b\r\n\r\n']) {
    assert.equal(walk(s), 'bad', JSON.stringify(s));
  }
});

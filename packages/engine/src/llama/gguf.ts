/**
 * A minimal GGUF v3 writer: metadata key/values and F32/F16 tensors, laid out as llama.cpp's
 * `gguf.cpp` reads them (little-endian; header, metadata, tensor infos, then tensor data with each
 * tensor aligned to 32 bytes). Only what the generated test model needs.
 */

/** GGUF metadata value type ids (`enum gguf_type`). */
const enum ValueType {
  Uint32 = 4,
  Int32 = 5,
  Float32 = 6,
  Bool = 7,
  String = 8,
  Array = 9,
}

/** One metadata value, tagged with its GGUF type. */
export type GgufValue =
  | { readonly type: 'u32'; readonly value: number }
  | { readonly type: 'f32'; readonly value: number }
  | { readonly type: 'bool'; readonly value: boolean }
  | { readonly type: 'string'; readonly value: string }
  | { readonly type: 'string[]'; readonly value: readonly string[] }
  | { readonly type: 'i32[]'; readonly value: readonly number[] };

/** A tensor to write. `dims` are ggml `ne` order: the innermost (contiguous) dimension first. */
export interface GgufTensor {
  readonly name: string;
  readonly dims: readonly number[];
  /** Storage type; F16 data is converted from `data` with round-to-nearest-even. */
  readonly type: 'f32' | 'f16';
  readonly data: Float32Array;
}

const ALIGNMENT = 32;
const GGML_TYPE_F32 = 0;
const GGML_TYPE_F16 = 1;

/** Appends little-endian primitives to a growing list of chunks. */
class ByteSink {
  private readonly chunks: Buffer[] = [];
  length = 0;

  push(buf: Buffer): void {
    this.chunks.push(buf);
    this.length += buf.length;
  }
  u32(v: number): void {
    const b = Buffer.allocUnsafe(4);
    b.writeUInt32LE(v >>> 0);
    this.push(b);
  }
  i32(v: number): void {
    const b = Buffer.allocUnsafe(4);
    b.writeInt32LE(v | 0);
    this.push(b);
  }
  u64(v: number): void {
    const b = Buffer.allocUnsafe(8);
    b.writeBigUInt64LE(BigInt(v));
    this.push(b);
  }
  f32(v: number): void {
    const b = Buffer.allocUnsafe(4);
    b.writeFloatLE(v);
    this.push(b);
  }
  str(s: string): void {
    const bytes = Buffer.from(s, 'utf8');
    this.u64(bytes.length);
    this.push(bytes);
  }
  pad(): void {
    const rem = this.length % ALIGNMENT;
    if (rem !== 0) this.push(Buffer.alloc(ALIGNMENT - rem));
  }
  concat(): Buffer {
    return Buffer.concat(this.chunks, this.length);
  }
}

function writeValue(out: ByteSink, v: GgufValue): void {
  switch (v.type) {
    case 'u32':
      out.u32(ValueType.Uint32);
      out.u32(v.value);
      return;
    case 'f32':
      out.u32(ValueType.Float32);
      out.f32(v.value);
      return;
    case 'bool':
      out.u32(ValueType.Bool);
      out.push(Buffer.from([v.value ? 1 : 0]));
      return;
    case 'string':
      out.u32(ValueType.String);
      out.str(v.value);
      return;
    case 'string[]':
      out.u32(ValueType.Array);
      out.u32(ValueType.String);
      out.u64(v.value.length);
      for (const s of v.value) out.str(s);
      return;
    case 'i32[]':
      out.u32(ValueType.Array);
      out.u32(ValueType.Int32);
      out.u64(v.value.length);
      for (const n of v.value) out.i32(n);
      return;
  }
}

const f32View = new Float32Array(1);
const u32View = new Uint32Array(f32View.buffer);

/** IEEE half-precision bits of a float32 value, rounded to nearest, ties to even (as ggml does). */
export function toHalfBits(value: number): number {
  f32View[0] = value;
  const x = u32View[0] ?? 0;
  const sign = (x >>> 16) & 0x8000;
  const exp = (x >>> 23) & 0xff;
  const mant = x & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant !== 0 ? 0x200 : 0); // Inf / NaN
  const e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00; // overflow → Inf
  if (e <= 0) {
    if (e < -10) return sign; // underflow → ±0
    const m = mant | 0x800000; // subnormal half: shift the implicit bit in
    const shift = 14 - e;
    const half = m >>> shift;
    const rem = m & ((1 << shift) - 1);
    const mid = 1 << (shift - 1);
    return sign | (half + (rem > mid || (rem === mid && (half & 1) === 1) ? 1 : 0));
  }
  const half = (e << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  // A carry out of the mantissa correctly bumps the exponent (and up to Inf).
  return sign | (half + (rem > 0x1000 || (rem === 0x1000 && (half & 1) === 1) ? 1 : 0));
}

function tensorBytes(t: GgufTensor): Buffer {
  if (t.type === 'f32') {
    const b = Buffer.allocUnsafe(t.data.length * 4);
    for (let i = 0; i < t.data.length; i++) b.writeFloatLE(t.data[i] ?? 0, i * 4);
    return b;
  }
  const b = Buffer.allocUnsafe(t.data.length * 2);
  for (let i = 0; i < t.data.length; i++) b.writeUInt16LE(toHalfBits(t.data[i] ?? 0), i * 2);
  return b;
}

/**
 * Serialises a GGUF v3 file. Metadata keys are written in the given order, so the same input
 * always gives the same bytes.
 */
export function writeGguf(
  metadata: ReadonlyArray<readonly [string, GgufValue]>,
  tensors: readonly GgufTensor[],
): Buffer {
  const out = new ByteSink();
  out.push(Buffer.from('GGUF', 'ascii'));
  out.u32(3);
  out.u64(tensors.length);
  out.u64(metadata.length);
  for (const [key, value] of metadata) {
    out.str(key);
    writeValue(out, value);
  }
  const blobs = tensors.map(tensorBytes);
  let offset = 0;
  tensors.forEach((t, i) => {
    const count = t.dims.reduce((a, b) => a * b, 1);
    if (count !== t.data.length)
      throw new Error(`tensor ${t.name}: dims hold ${count} values, data has ${t.data.length}`);
    out.str(t.name);
    out.u32(t.dims.length);
    for (const d of t.dims) out.u64(d);
    out.u32(t.type === 'f32' ? GGML_TYPE_F32 : GGML_TYPE_F16);
    out.u64(offset);
    offset += Math.ceil((blobs[i]?.length ?? 0) / ALIGNMENT) * ALIGNMENT;
  });
  out.pad();
  for (const blob of blobs) {
    out.push(blob);
    out.pad();
  }
  return out.concat();
}

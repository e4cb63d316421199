/**
 * The generated model's byte-level BPE vocabulary, in the form llama.cpp's `gpt2` tokenizer reads:
 * every byte is a token spelled with GPT-2's byte→unicode table (space is `Ġ`, newline `Ċ`), a few
 * English merges on top, and two control tokens. llama.cpp refuses a BPE vocabulary without
 * `tokenizer.ggml.merges`, and needs the newline byte token for its linefeed id.
 */

/** llama.cpp token types (`enum llama_token_type`). */
export const TOKEN_TYPE_NORMAL = 1;
export const TOKEN_TYPE_CONTROL = 3;

/** Merges in rank order; each side is already a token (a byte or an earlier merge). */
const MERGES: ReadonlyArray<readonly [string, string]> = [
  [' ', 't'],
  ['h', 'e'],
  [' ', 'a'],
  ['i', 'n'],
  [' t', 'he'],
  ['e', 'r'],
  ['o', 'n'],
  [' ', 's'],
  ['r', 'e'],
  ['a', 't'],
  ['e', 'n'],
  [' ', 'o'],
  [' ', 'w'],
  [' ', 'c'],
  ['i', 's'],
  ['o', 'r'],
  ['e', 's'],
  ['a', 'n'],
  ['i', 't'],
  ['in', 'g'],
  [' ', 'b'],
  ['e', 'd'],
  [' ', 'f'],
  [' ', 'p'],
  ['o', 'u'],
  [' a', 'n'],
  [' an', 'd'],
  [' o', 'f'],
  [' ', 'i'],
  [' i', 'n'],
  [' t', 'o'],
  ['a', 'l'],
];

/** GPT-2's `bytes_to_unicode`: printable bytes map to themselves, the rest to U+0100 onwards. */
function byteToUnicode(): string[] {
  const table: string[] = new Array<string>(256);
  let next = 256;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    table[b] = String.fromCodePoint(printable ? b : next++);
  }
  return table;
}

/** The vocabulary: token strings (GGUF spelling), types, raw bytes and a bias class per token. */
export interface Vocab {
  readonly tokens: readonly string[];
  readonly types: readonly number[];
  readonly merges: readonly string[];
  /** Raw bytes per token id; control tokens have none. */
  readonly bytes: readonly Uint8Array[];
  readonly bosId: number;
  readonly eosId: number;
}

function spell(text: string, table: readonly string[]): string {
  return Array.from(Buffer.from(text, 'latin1'), (b) => table[b] ?? '').join('');
}

/** Builds the ~290-token vocabulary: ids 0–255 are the bytes, then merges, then BOS and EOS. */
export function buildVocab(): Vocab {
  const table = byteToUnicode();
  const tokens: string[] = [];
  const bytes: Uint8Array[] = [];
  for (let b = 0; b < 256; b++) {
    tokens.push(table[b] ?? '');
    bytes.push(Uint8Array.of(b));
  }
  const merges: string[] = [];
  for (const [left, right] of MERGES) {
    merges.push(`${spell(left, table)} ${spell(right, table)}`);
    tokens.push(spell(left + right, table));
    bytes.push(new Uint8Array(Buffer.from(left + right, 'latin1')));
  }
  const types = tokens.map(() => TOKEN_TYPE_NORMAL);
  const bosId = tokens.length;
  tokens.push('<|startoftext|>');
  const eosId = tokens.length;
  // llama.cpp recognises this spelling as end-of-generation; another name draws a tokenizer warning.
  tokens.push('<|endoftext|>');
  types.push(TOKEN_TYPE_CONTROL, TOKEN_TYPE_CONTROL);
  bytes.push(new Uint8Array(0), new Uint8Array(0));
  return { tokens, types, merges, bytes, bosId, eosId };
}

/**
 * The generator's preference for a token, in nats added through the output projection: printable
 * ASCII and newline are neutral, merges (common English pieces) slightly favoured, control bytes,
 * non-ASCII bytes and EOS pushed far down so greedy output stays readable, BOS never produced.
 */
export function tokenBias(vocab: Vocab, id: number): number {
  if (id === vocab.bosId) return -30;
  if (id === vocab.eosId) return -12;
  if (id >= 256) return 0.5;
  if (id === 0x0a || (id >= 0x20 && id <= 0x7e)) return 0;
  return -12;
}

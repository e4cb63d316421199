/**
 * The simulated model's vocabulary and tokenizer: an end-of-sequence token, all 256 single bytes
 * (so any UTF-8 text round-trips) and a few hundred English chunks, matched longest-first like a
 * byte-level BPE would. Chunk pairs such as " artificial" / " Artificial" exist on purpose: they
 * are the near-ties the project's comparisons are about.
 */

/** Multi-byte chunks (ASCII only, so their bytes are their char codes). */
const CHUNKS: readonly string[] = [
  // frequent words, with the leading space of a byte-level BPE
  ' the',
  ' The',
  ' of',
  ' and',
  ' to',
  ' in',
  ' a',
  ' is',
  ' that',
  ' for',
  ' it',
  ' as',
  ' was',
  ' with',
  ' be',
  ' by',
  ' on',
  ' not',
  ' he',
  ' I',
  ' this',
  ' are',
  ' or',
  ' his',
  ' from',
  ' at',
  ' which',
  ' but',
  ' have',
  ' an',
  ' had',
  ' they',
  ' you',
  ' were',
  ' their',
  ' one',
  ' all',
  ' we',
  ' can',
  ' her',
  ' has',
  ' there',
  ' been',
  ' if',
  ' more',
  ' when',
  ' will',
  ' would',
  ' who',
  ' so',
  ' no',
  ' do',
  ' does',
  ' did',
  ' said',
  ' what',
  ' about',
  ' like',
  ' some',
  ' other',
  ' into',
  ' could',
  ' than',
  ' then',
  ' them',
  ' these',
  ' only',
  ' also',
  ' after',
  ' over',
  ' most',
  ' very',
  ' because',
  ' through',
  ' where',
  ' while',
  ' each',
  ' many',
  ' how',
  ' may',
  ' well',
  ' any',
  ' such',
  ' even',
  ' make',
  ' just',
  ' use',
  ' used',
  ' way',
  ' new',
  ' first',
  ' two',
  ' time',
  ' world',
  ' people',
  ' work',
  ' water',
  ' day',
  ' year',
  ' good',
  ' same',
  ' different',
  ' number',
  ' part',
  ' small',
  ' large',
  ' high',
  ' long',
  ' little',
  ' great',
  ' place',
  ' point',
  ' question',
  ' answer',
  ' example',
  ' result',
  ' problem',
  ' step',
  ' process',
  ' here',
  ' there',
  ' now',
  ' still',
  ' should',
  ' must',
  ' might',
  ' never',
  // the domain of the project's story
  ' model',
  ' models',
  ' language',
  ' artificial',
  ' Artificial',
  ' intelligence',
  ' Intelligence',
  ' AI',
  ' data',
  ' system',
  ' learning',
  ' machine',
  ' token',
  ' tokens',
  ' probability',
  ' cache',
  ' state',
  ' layer',
  ' layers',
  ' value',
  ' key',
  ' network',
  ' neural',
  ' training',
  ' output',
  ' input',
  ' text',
  ' prompt',
  ' server',
  ' request',
  ' response',
  ' memory',
  ' weights',
  ' zero',
  ' bug',
  ' test',
  ' error',
  ' noise',
  ' shift',
  // pieces
  'ing',
  'ed',
  'er',
  'es',
  'ly',
  'ion',
  'tion',
  'ation',
  'ment',
  'ness',
  'al',
  'ic',
  'ity',
  'ive',
  'ous',
  'able',
  'est',
  're',
  'un',
  'in',
  'th',
  'he',
  'an',
  'on',
  'at',
  'en',
  'st',
  'ou',
  'or',
  'ar',
  'le',
  'll',
  've',
  "'s",
  "'t",
  ', ',
  '. ',
  '.\n',
  '\n\n',
  '  ',
  ' (',
  ' "',
  ' -',
  ' 1',
  ' 2',
  ' 10',
  '00',
  '19',
  '20',
  'The',
  'It',
  'In',
  'This',
  'We',
  'Hello',
  ' Hello',
  'Hi',
];

/** The id of the end-of-sequence token. */
export const EOS_ID = 0;
const EOS_TEXT = '<|endoftext|>';
/** The id of the single-byte token for byte `b` is `BYTE_BASE + b`. */
export const BYTE_BASE = 1;

/** Token classes, used for the static prior that keeps output readable. */
export type TokenClass = 'eos' | 'word' | 'piece' | 'letter' | 'other' | 'hidden';

/** A node of the byte trie used for longest-match tokenization. */
interface TrieNode {
  id: number;
  next: Map<number, TrieNode>;
}

/** The vocabulary: texts, bytes and classes by id, and the matcher. */
export interface Vocab {
  readonly size: number;
  readonly texts: readonly string[];
  readonly bytes: readonly Uint8Array[];
  readonly classes: readonly TokenClass[];
  /** Length in bytes of the longest token. */
  readonly maxLen: number;
  readonly trie: TrieNode;
}

function byteText(b: number): string {
  // A lone byte ≥ 0x80 is a partial UTF-8 sequence: rendered as U+FFFD, as real engines do.
  return b < 0x80 ? String.fromCharCode(b) : '\uFFFD';
}

function byteClass(b: number): TokenClass {
  if (b === 0x0a || b === 0x20) return 'other';
  if ((b >= 0x41 && b <= 0x5a) || (b >= 0x61 && b <= 0x7a)) return 'letter';
  if (b > 0x20 && b < 0x7f) return 'other';
  return 'hidden';
}

function buildVocab(): Vocab {
  const texts: string[] = [EOS_TEXT];
  const bytes: Uint8Array[] = [new Uint8Array(0)];
  const classes: TokenClass[] = ['eos'];
  for (let b = 0; b < 256; b++) {
    texts.push(byteText(b));
    bytes.push(Uint8Array.of(b));
    classes.push(byteClass(b));
  }
  const seen = new Set<string>();
  for (const chunk of CHUNKS) {
    if (seen.has(chunk)) continue;
    seen.add(chunk);
    texts.push(chunk);
    bytes.push(Uint8Array.from(chunk, (c) => c.charCodeAt(0)));
    classes.push(chunk.length > 2 && /^[ A-Z]/.test(chunk) ? 'word' : 'piece');
  }
  const trie: TrieNode = { id: -1, next: new Map() };
  let maxLen = 1;
  for (let id = BYTE_BASE; id < texts.length; id++) {
    const bs = bytes[id] as Uint8Array;
    maxLen = Math.max(maxLen, bs.length);
    let node = trie;
    for (const b of bs) {
      let child = node.next.get(b);
      if (!child) {
        child = { id: -1, next: new Map() };
        node.next.set(b, child);
      }
      node = child;
    }
    node.id = id;
  }
  return { size: texts.length, texts, bytes, classes, maxLen, trie };
}

/** The one fixed vocabulary of the simulated model. */
export const VOCAB: Vocab = buildVocab();

const encoder = new TextEncoder();

/** Text → ids, longest match first (so " artificial" is one token, "xyz" three). */
export function tokenizeLongest(text: string): number[] {
  const input = encoder.encode(text);
  const out: number[] = [];
  let i = 0;
  while (i < input.length) {
    let node: TrieNode | undefined = VOCAB.trie;
    let bestId = BYTE_BASE + (input[i] as number);
    let bestLen = 1;
    for (let j = i; j < input.length; j++) {
      node = node.next.get(input[j] as number);
      if (!node) break;
      if (node.id >= 0) {
        bestId = node.id;
        bestLen = j - i + 1;
      }
    }
    out.push(bestId);
    i += bestLen;
  }
  return out;
}

/** Text → one single-byte token per UTF-8 byte (the `tokenizerSplit` tokenizer). */
export function tokenizeBytes(text: string): number[] {
  const input = encoder.encode(text);
  const out = new Array<number>(input.length);
  for (let i = 0; i < input.length; i++) out[i] = BYTE_BASE + (input[i] as number);
  return out;
}

/** The concatenated bytes of ids (EOS contributes none; unknown ids throw). */
export function concatBytes(ids: readonly number[]): Uint8Array {
  let n = 0;
  for (const id of ids) n += tokenBytesOf(id).length;
  const out = new Uint8Array(n);
  let at = 0;
  for (const id of ids) {
    const b = tokenBytesOf(id);
    out.set(b, at);
    at += b.length;
  }
  return out;
}

/** The bytes of one token; a RangeError for an id outside the vocabulary. */
export function tokenBytesOf(id: number): Uint8Array {
  const b = VOCAB.bytes[id];
  if (!b) throw new RangeError(`token id ${id} is outside the vocabulary (0..${VOCAB.size - 1})`);
  return b;
}

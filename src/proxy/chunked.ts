const CH_SIZE = 0;
const CH_EXT = 1;
const CH_SIZE_LF = 2;
const CH_DATA = 3;
const CH_DATA_CR = 4;
const CH_DATA_LF = 5;
const CH_TRAILER = 6;
const CH_DONE = 7;

/** Token characters (RFC 9110 §5.6.2), for trailer field names. */
const TCHAR = new Uint8Array(256);
for (const ch of "!#$%&'*+-.^_`|~") TCHAR[ch.charCodeAt(0)] = 1;
for (let c = 48; c <= 57; c++) TCHAR[c] = 1;
for (let c = 65; c <= 90; c++) TCHAR[c] = 1;
for (let c = 97; c <= 122; c++) TCHAR[c] = 1;
/** Trailer fields that would change the message's framing. */
const FRAMING_TRAILERS = new Set(['transfer-encoding', 'content-length']);
/** Bytes allowed in a chunk extension: token characters, `;`, `=` and `"`. */
const EXT_BYTES = TCHAR.slice();
for (const ch of ';="') EXT_BYTES[ch.charCodeAt(0)] = 1;

/**
 * Walks HTTP/1.1 chunked framing (RFC 9112 §7.1) without copying: finds where a chunked body ends
 * in a byte stream that arrives in arbitrary pieces, and counts its data bytes. Strict: anything
 * but hex sizes, extensions of token bytes, CRLF line ends and trailer lines sets `bad`, and the connection is
 * not trusted further (a lenient walker is how request smuggling starts).
 */
export class ChunkWalker {
  state = CH_SIZE;
  size = 0;
  lineLen = 0;
  dataBytes = 0;
  bad = false;
  digits = false;
  cr = false;
  /** In a trailer line, past its colon. */
  inValue = false;
  /** The trailer line's field name so far, lower-cased (its first 32 bytes). */
  name = '';
  reset(): void {
    this.digits = false;
    this.cr = false;
    this.inValue = false;
    this.name = '';
    this.state = CH_SIZE;
    this.size = 0;
    this.lineLen = 0;
    this.dataBytes = 0;
    this.bad = false;
  }
  /** Index just past the end of the chunked body in `d`, or -1 when it goes on. */
  walk(d: Buffer, from: number): number {
    let i = from;
    const len = d.length;
    while (i < len) {
      switch (this.state) {
        case CH_SIZE: {
          const c = d[i] as number;
          let v: number;
          if (c >= 48 && c <= 57) v = c - 48;
          else if (c >= 97 && c <= 102) v = c - 87;
          else if (c >= 65 && c <= 70) v = c - 55;
          else {
            // At least one hex digit, then an extension (';…') or CRLF.
            if (!this.digits || (c !== 13 && c !== 59 && c !== 32 && c !== 9)) this.bad = true;
            this.state = c === 13 ? CH_SIZE_LF : CH_EXT;
            i++;
            if (this.bad) return -1;
            break;
          }
          this.size = this.size * 16 + v;
          this.digits = true;
          if (this.size > 2 ** 40) {
            this.bad = true;
            return -1;
          }
          i++;
          break;
        }
        case CH_EXT: {
          const c = d[i] as number;
          if (c === 13) this.state = CH_SIZE_LF;
          else if (EXT_BYTES[c] !== 1) {
            // Stricter than RFC 9112's BWS and quoted-string: no space, control or non-ASCII byte in
            // an extension. What a parser further on may read differently is not forwarded.
            this.bad = true;
            return -1;
          }
          i++;
          break;
        }
        case CH_SIZE_LF:
          if (d[i] !== 10) {
            this.bad = true;
            return -1;
          }
          i++;
          this.digits = false;
          if (this.size === 0) {
            this.state = CH_TRAILER;
            this.lineLen = 0;
          } else this.state = CH_DATA;
          break;
        case CH_DATA: {
          const take = Math.min(this.size, len - i);
          i += take;
          this.size -= take;
          this.dataBytes += take;
          if (this.size === 0) this.state = CH_DATA_CR;
          break;
        }
        case CH_DATA_CR:
          if (d[i] !== 13) {
            this.bad = true;
            return -1;
          }
          i++;
          this.state = CH_DATA_LF;
          break;
        case CH_DATA_LF:
          if (d[i] !== 10) {
            this.bad = true;
            return -1;
          }
          i++;
          this.state = CH_SIZE;
          this.size = 0;
          break;
        case CH_TRAILER: {
          const c = d[i] as number;
          i++;
          if (c === 10) {
            if (!this.cr || (this.lineLen > 0 && !this.inValue)) {
              this.bad = true;
              return -1;
            }
            this.cr = false;
            this.inValue = false;
            this.name = '';
            if (this.lineLen === 0) {
              this.state = CH_DONE;
              return i;
            }
            this.lineLen = 0;
          } else if (c === 13) this.cr = true;
          else {
            // A trailer line is a field line: a token, ':', then no control byte but HTAB.
            if (this.cr || (this.inValue ? c < 32 ? c !== 9 : c === 127 : c === 58 ? this.lineLen === 0 : TCHAR[c] !== 1)) {
              this.bad = true;
              return -1;
            }
            if (c === 58) {
              // Framing fields in trailers are refused by llhttp: read differently further on.
              if (!this.inValue && FRAMING_TRAILERS.has(this.name)) {
                this.bad = true;
                return -1;
              }
              this.inValue = true;
            } else if (!this.inValue && this.name.length < 32) this.name += String.fromCharCode(c | 0x20);
            this.lineLen++;
          }
          break;
        }
        default:
          return i;
      }
    }
    return -1;
  }
}


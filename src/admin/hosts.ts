import { isIP } from 'node:net';

/**
 * Which `Host` values the admin port answers. A DNS-rebinding page makes an engineer's browser
 * send requests to the admin port under the attacker's own name (`Host: attacker.example`), and
 * the same-origin policy then lets the page read `/ui/data` and `/metrics`; refusing names the
 * operator did not list closes that. IP literals are always allowed: a rebinding attack needs a
 * name (a page served from an IP address cannot resolve it to another one), and Prometheus and the
 * kubelet reach pods by IP. A request without `Host` (HTTP/1.0; node refuses it on HTTP/1.1) is
 * allowed too: browsers always send one, so no page can make one.
 */
export class AdminHosts {
  private readonly names: ReadonlySet<string>;

  /** `bindHost`: the admin bind address (a name there is allowed); `allowedHosts`: `admin.allowedHosts`. */
  constructor(bindHost: string, allowedHosts: readonly string[]) {
    const names = new Set(['localhost', ...allowedHosts.map(normalName)]);
    if (isIP(bindHost) === 0 && isIP(bindHost.replace(/^\[|\]$/g, '')) === 0) names.add(normalName(bindHost));
    this.names = names;
  }

  /** True when a request with this `Host` header value (undefined: none) may be answered. */
  allows(host: string | undefined): boolean {
    if (host === undefined || host === '') return true;
    // host[:port] only: a bracketed IPv6 literal or a reg-name/IPv4 without userinfo, path or spaces.
    if (!/^(?:\[[0-9A-Fa-f:.]+\]|[^\s/?#@\\[\]:]+)(?::\d*)?$/.test(host)) return false;
    let hostname: string;
    try {
      // The WHATWG parser, as the browser reads the name it connected to (IPv4 forms normalised,
      // IDNs as punycode, lower case).
      hostname = new URL(`http://${host}/`).hostname;
    } catch {
      return false;
    }
    if (hostname.startsWith('[') || isIP(hostname) !== 0) return true;
    return this.names.has(normalName(hostname));
  }
}

function normalName(name: string): string {
  return name.toLowerCase().replace(/\.$/, '');
}

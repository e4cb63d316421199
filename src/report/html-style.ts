/** The report's stylesheet (inline: the page loads nothing). Colours work in light and dark schemes. */
export const HTML_STYLE = `
:root { color-scheme: light dark; --bg: #fff; --fg: #1d232a; --muted: #5f6b76; --line: #d5dbe1; --card: #f6f8fa; --unknown: repeating-linear-gradient(45deg, #ccc 0 3px, #eee 3px 6px); }
@media (prefers-color-scheme: dark) { :root { --bg: #15191e; --fg: #e4e8ec; --muted: #9aa5b1; --line: #343c45; --card: #1d232a; } }
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--fg); font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
header, main { max-width: 1100px; margin: 0 auto; padding: 0 20px; }
header { padding-top: 18px; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 28px 0 8px; border-bottom: 1px solid var(--line); padding-bottom: 4px; }
code { font: 12px/1.3 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
.muted { color: var(--muted); } .note { color: var(--muted); font-style: italic; }
table { border-collapse: collapse; margin: 8px 0; } th, td { padding: 3px 10px; border-bottom: 1px solid var(--line); text-align: left; vertical-align: top; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
table.worst td { font-size: 13px; }
.chart { display: block; max-width: 100%; height: auto; margin: 8px 0; }
.chart .grid { stroke: var(--line); stroke-width: 1; } .chart .axisline, .chart .tick { stroke: var(--muted); }
.chart text { fill: var(--muted); font-size: 11px; } .chart .marker { stroke: #c0392b; stroke-dasharray: 4 3; } .chart .marker-label { fill: #c0392b; paint-order: stroke; stroke: var(--bg); stroke-width: 4px; stroke-linejoin: round; }
.chart .hit { fill: transparent; } .chart .bar:hover rect:not(.hit) { opacity: 0.75; }
.s-zero { fill: #8fbc8f; } .s-noise { fill: #2e8b57; } .s-shift { fill: #e67e22; } .empty { fill: var(--line); }
.badge { display: inline-block; padding: 0 6px; border-radius: 4px; font-size: 12px; color: #fff; background: #777; }
.v-global_shift { background: #c0392b; fill: #c0392b; } .v-early_shift { background: #e67e22; fill: #e67e22; } .v-local_shift { background: #d4a017; fill: #d4a017; }
.v-prompt_mismatch { background: #34495e; fill: #34495e; } .v-tokenizer_mismatch { background: #8e44ad; fill: #8e44ad; } .v-noise { background: #2e8b57; fill: #2e8b57; } .v-identical { background: #27ae60; fill: #27ae60; } .v-incomparable { background: #7f8c8d; fill: #7f8c8d; }
.c-ambiguous { background: #95a5a6; fill: #95a5a6; } .c-gray { background: #5d6d7e; fill: #5d6d7e; } .c-systematic { background: #c0392b; fill: #c0392b; }
.flip-info { color: #fff; border-radius: 4px; padding: 0 6px; font-size: 12px; }
.controls { display: flex; gap: 10px; align-items: center; margin: 8px 0; flex-wrap: wrap; }
.strip { background: var(--card); border: 1px solid var(--line); border-radius: 6px; padding: 8px 10px; margin: 8px 0; }
.strip-head { display: flex; gap: 10px; flex-wrap: wrap; align-items: baseline; font-size: 13px; }
.pair-id { font-weight: 600; } .explanation { margin: 4px 0; font-size: 13px; color: var(--muted); }
.tokens { font: 13px/1.9 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; white-space: pre-wrap; word-break: break-all; color: #111; }
.tok { display: inline-block; line-height: 1.5; margin: 1px 2px 1px 0; padding: 0 1px; border-radius: 3px; box-shadow: inset 0 0 0 1px rgba(0,0,0,0.22); cursor: default; }
.tok.scored { border-bottom: 2px dashed rgba(0,0,0,0.35); }
.tok.flip { outline: 2px solid #c0392b; outline-offset: 1px; padding: 1px 2px; }
.flip-arrow { color: #c0392b; padding: 0 2px; } .flip-c { text-decoration: underline wavy #c0392b; }
.gap { color: #fff; background: #6e1a10; font-size: 10px; padding: 0 3px; margin-left: 2px; border-radius: 3px; }
.tokens .muted { font-family: system-ui, sans-serif; font-size: 12px; }
.prompt { margin: 4px 0; font: 12px/1.4 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; white-space: pre-wrap; word-break: break-word; max-height: 4.2em; overflow: hidden; border-left: 3px solid var(--line); padding-left: 6px; }
.prompt .muted { font-family: system-ui, sans-serif; }
.similar { font-size: 12px; border: 1px solid var(--line); border-radius: 4px; padding: 0 5px; white-space: nowrap; }
.strip > p, .strip > details { margin: 3px 0; }
details.explanation summary { cursor: pointer; color: var(--muted); font-size: 12px; } details.explanation p { margin: 2px 0 4px 14px; font-size: 13px; color: var(--muted); }
.legend { display: flex; flex-wrap: wrap; gap: 6px 14px; align-items: center; margin: 8px 0; font-size: 12px; }
.legend .tok { font: 12px/1.9 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; color: #111; padding: 1px 6px; }
dl.key { margin: 8px 0; font-size: 13px; } dl.key dt { margin-top: 6px; } dl.key dd { margin: 2px 0 0 12px; color: var(--muted); }
table.worst td.prompt-cell { max-width: 360px; font: 12px/1.35 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; white-space: pre-wrap; word-break: break-word; }
#tip { position: fixed; display: none; z-index: 10; background: var(--bg); color: var(--fg); border: 1px solid var(--line); border-radius: 6px; padding: 6px 8px; box-shadow: 0 4px 16px rgba(0,0,0,0.2); font-size: 12px; pointer-events: none; }
#tip table { margin: 2px 6px 0 0; } #tip td { padding: 1px 6px; } #tip caption { text-align: left; font-weight: 600; }
#tip .chosen { font-weight: 700; } .tip-tables { display: flex; gap: 8px; } .tt { font-family: ui-monospace, monospace; }
`;

#!/usr/bin/env node
// Runs the compiled CLI (built by `npm ci` through the `prepare` script).
import { main } from '../dist/cli/main.js';

main(process.argv.slice(2)).then(
  (code) => {
    if (typeof code === 'number') process.exitCode = code;
  },
  (err) => {
    // Only bugs reach here: user errors are reported by the commands themselves.
    console.error(err);
    process.exitCode = 70;
  },
);

#!/usr/bin/env node
// Runs the compiled CLI (built by `npm ci` through the `prepare` script; `npm run dev -- …` runs
// the sources instead).
import '../dist/cli/run.js';

import { main } from './main.js';

/**
 * Runs the CLI on this process's arguments and sets its exit code: the entry of bin/logprobe.js
 * (the compiled dist/cli/run.js) and of `npm run dev -- …` (this file, from source, under tsx).
 */
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

// ANSI SGR colours and styles of a log line as spans with classes (logs.css), parsed by anser. The text
// goes into the page as text nodes only: a line holding markup shows that markup, it never runs.
import Anser from 'anser';
import type { JSX } from 'preact';

const BASIC = ['black', 'red', 'green', 'yellow', 'blue', 'magenta', 'cyan', 'white'];
const CUBE = [0, 95, 135, 175, 215, 255];

/** anser's class for a colour (`ansi-red`, `ansi-bright-red`, `ansi-palette-N`) as a class and a style. */
function colour(name: string | null, truecolor: string | null, side: 'fg' | 'bg', style: Record<string, string>): string | null {
  if (!name) return null;
  const prop = side === 'fg' ? 'color' : 'background-color';
  if (name === 'ansi-truecolor') {
    if (truecolor) style[prop] = `rgb(${truecolor})`;
    return null;
  }
  const palette = /^ansi-palette-(\d+)$/.exec(name);
  if (!palette) return `${name}-${side}`;
  const n = Number(palette[1]);
  if (n < 8) return `ansi-${BASIC[n]}-${side}`;
  if (n < 16) return `ansi-bright-${BASIC[n - 8]}-${side}`;
  if (n < 232) {
    const c = n - 16;
    style[prop] = `rgb(${CUBE[Math.floor(c / 36)]}, ${CUBE[Math.floor(c / 6) % 6]}, ${CUBE[c % 6]})`;
  } else {
    const g = 8 + (n - 232) * 10;
    style[prop] = `rgb(${g}, ${g}, ${g})`;
  }
  return null;
}

/** The line as text, or as spans when it carries escape sequences. */
export function ansiLine(text: string): string | JSX.Element[] {
  if (!text.includes('\x1b')) return text;
  return Anser.ansiToJson(text, { json: true, use_classes: true, remove_empty: true }).map((chunk, i) => {
    const style: Record<string, string> = {};
    const classes = [colour(chunk.fg, chunk.fg_truecolor, 'fg', style), colour(chunk.bg, chunk.bg_truecolor, 'bg', style), ...chunk.decorations.map((d) => `ansi-${d}`)].filter(Boolean);
    return classes.length || Object.keys(style).length ? (
      <span key={i} class={classes.join(' ') || undefined} style={style}>
        {chunk.content}
      </span>
    ) : (
      <span key={i}>{chunk.content}</span>
    );
  });
}

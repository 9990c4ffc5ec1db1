import { render } from 'preact';
import { App } from './app.tsx';
// The styles, in the order they apply: later files override earlier ones.
import './styles/base.css';
import './styles/chrome.css';
import './styles/content.css';
import './styles/jobs.css';
import './styles/charts-and-narrow.css';

render(<App />, document.getElementById('app')!);

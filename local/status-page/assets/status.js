// The status page's client: polls status.json every 2 s and renders it. No framework, no external
// assets; text goes in through textContent only, so ids from the tables can never inject markup.
const REFRESH_MS = 2000;

function element(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = text;
  if (className !== undefined) node.className = className;
  return node;
}

function renderColumns(columns) {
  const row = document.getElementById('models-columns');
  if (row.childElementCount === columns.length) return;
  row.replaceChildren(
    ...columns.map((name) => {
      const th = element('th', name);
      th.scope = 'col';
      return th;
    }),
  );
}

function renderRows(display) {
  const body = document.querySelector('#models tbody');
  body.replaceChildren(
    ...display.rows.map((cells, index) => {
      const tr = element('tr');
      tr.dataset.modelId = display.model_ids[index];
      cells.forEach((text, column) => {
        const cell = element(column === 0 ? 'th' : 'td', text);
        if (column === 0) cell.scope = 'row';
        if (text.includes('EXPIRED')) cell.className = 'expired';
        tr.append(cell);
      });
      return tr;
    }),
  );
  document.getElementById('empty').hidden = display.rows.length > 0;
}

function renderTotals(totals) {
  document.getElementById('totals').replaceChildren(
    ...totals.map(([label, value]) => {
      const group = element('div');
      group.append(element('dt', label), element('dd', value));
      return group;
    }),
  );
}

function render(status) {
  document.getElementById('pool-name').textContent = status.pool;
  const banner = document.getElementById('drain-banner');
  banner.hidden = status.display.banner === undefined;
  banner.textContent = status.display.banner ?? '';
  renderTotals(status.display.totals);
  renderColumns(status.display.columns);
  renderRows(status.display);
  document.getElementById('updated').textContent =
    `Updated ${new Date(status.generated_at).toLocaleTimeString()}.`;
}

let failing = false;

async function refresh() {
  const connection = document.getElementById('connection');
  try {
    const answer = await fetch('status.json', { cache: 'no-store' });
    const body = await answer.json();
    if (!answer.ok) throw new Error(body.error ?? `HTTP ${answer.status}`);
    render(body);
    if (failing) connection.textContent = 'Reconnected.';
    failing = false;
  } catch (error) {
    // Announced once per outage; the last good picture stays on screen.
    if (!failing) connection.textContent = `Cannot read the status: ${error.message}. Retrying...`;
    failing = true;
  } finally {
    setTimeout(refresh, REFRESH_MS);
  }
}

refresh();

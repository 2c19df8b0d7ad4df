
(function () {
  const q = id => document.getElementById(id);
  const items = Array.from(document.querySelectorAll('#convs > details'));
  const controls = ['f-failed', 'f-metric', 'f-target', 'f-demo', 'f-search'].map(q).filter(Boolean);
  function apply() {
    const failed = q('f-failed') && q('f-failed').checked;
    const metric = q('f-metric') ? q('f-metric').value : '';
    const target = q('f-target') ? q('f-target').value : '';
    const demo = q('f-demo') ? q('f-demo').value : '';
    const text = q('f-search') ? q('f-search').value.trim().toLowerCase() : '';
    let shown = 0;
    for (const d of items) {
      const ok = (!failed || d.dataset.status !== 'passed') && (!metric || d.dataset.metric === metric)
        && (!target || d.dataset.target === target) && (!demo || d.dataset.demo.split('|').includes(demo))
        && (!text || d.textContent.toLowerCase().includes(text));
      d.style.display = ok ? '' : 'none';
      if (ok) shown++;
    }
    if (q('f-count')) q('f-count').textContent = shown + ' shown';
  }
  for (const c of controls) { c.addEventListener('input', apply); c.addEventListener('change', apply); }
  // Filters and an open item can be preset in the URL: #failed=1&metric=m01&target=t&demo=age: x&q=text&open=<testid>
  const params = new URLSearchParams(location.hash.slice(1));
  const preset = {'f-metric': 'metric', 'f-target': 'target', 'f-demo': 'demo', 'f-search': 'q'};
  for (const [id, key] of Object.entries(preset)) if (q(id) && params.has(key)) q(id).value = params.get(key);
  if (q('f-failed') && params.get('failed') === '1') q('f-failed').checked = true;
  if (params.has('open')) {
    const d = document.querySelector('[data-testid="' + CSS.escape(params.get('open')) + '"]');
    if (d) { d.open = true; d.scrollIntoView(); }
  }
  apply();
})();

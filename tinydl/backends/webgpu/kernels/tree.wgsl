{#- Workgroup tree reductions over `part` (and `index`), WG entries halved `steps` times; every
    invocation of the workgroup runs them. Imported by the reducing templates. -#}
{% macro fold(WG, steps, combine) %}
{% set ns = namespace(step=WG // 2) %}
{% for _ in range(steps) %}
    workgroupBarrier();
    if (li < {{ ns.step }}u) {
        part[li] = {{ combine.format(a="part[li]", b="part[li + %du]" % ns.step) }};
    }
{% set ns.step = ns.step // 2 %}
{% endfor %}
{% endmacro %}
{#- The (value, index) pair for which `before` holds ends in part[0], index[0]. -#}
{% macro fold_pairs(WG, steps) %}
{% set ns = namespace(step=WG // 2) %}
{% for _ in range(steps) %}
    workgroupBarrier();
    if (li < {{ ns.step }}u && before(part[li + {{ ns.step }}u], index[li + {{ ns.step }}u], part[li], index[li])) {
        part[li] = part[li + {{ ns.step }}u];
        index[li] = index[li + {{ ns.step }}u];
    }
{% set ns.step = ns.step // 2 %}
{% endfor %}
{% endmacro %}

{#- The flat index `f` of index tuple `t` (k coordinates into kdims, read from `idx`; negative
    ones count from the end, any still outside is clamped). Imported by gather_nd.wgsl and
    scatter_tuples.wgsl. -#}
{% macro flat_index(t, k, kdims) %}
    var f = 0u;
{% for j in range(k) %}
    {
        var q = idx[{{ t }} * {{ k }}u + {{ j }}u];
        if (q < 0) {
            q = q + {{ kdims[j] }};
        }
        f = f * {{ kdims[j] }}u + u32(clamp(q, 0, {{ kdims[j] - 1 }}));
    }
{% endfor %}
{% endmacro %}

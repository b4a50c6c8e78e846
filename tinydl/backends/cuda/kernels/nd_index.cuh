{#- The flat index `f` of index tuple `t` (k coordinates into kdims, read from `idx`; negative
    ones count from the end, any still outside is clamped). Imported by gather_nd.cu and
    scatter_tuples.cu. -#}
{% macro flat_index(t, k, kdims) %}
    unsigned long long f = 0;
{% for j in range(k) %}
    {
        long long q = (long long)idx[{{ t }} * {{ k }}ull + {{ j }}ull];
        if (q < 0) q += {{ kdims[j] }}LL;
        q = q < 0 ? 0 : (q > {{ kdims[j] - 1 }}LL ? {{ kdims[j] - 1 }}LL : q);
        f = f * {{ kdims[j] }}ull + (unsigned long long)q;
    }
{% endfor %}
{% endmacro %}

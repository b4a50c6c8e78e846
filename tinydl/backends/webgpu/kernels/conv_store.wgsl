{# Macros of the convolution templates (imported with context; renders nothing itself). #}
{# store: write vec4<f32> `r` (output channels 4*oc4..4*oc4+3 of pixel ox,oy of image n) in the
   output layout: nc4hw4, NCHW, NHWC (a Transpose to channels-last fused), or NCHW through a
   fused DepthToSpace (BS, CO, dcr). #}
{% macro store(r, ox, oy, oc4) %}
            if (({{ ox }}) < {{ OW }}u && ({{ oy }}) < {{ OH }}u && ({{ oc4 }}) < {{ OC4 }}u) {
{% if out_mode == "nc4hw4" %}
                y[((n * {{ OC4 }}u + ({{ oc4 }})) * {{ OH }}u + ({{ oy }})) * {{ OW }}u + ({{ ox }})] = vec4<{{ ot }}>({{ r }});
{% elif out_mode == "nhwc" %}
{% for j in range(4) %}
                if (({{ oc4 }}) * 4u + {{ j }}u < {{ OC }}u) {
                    y[((n * {{ OH }}u + ({{ oy }})) * {{ OW }}u + ({{ ox }})) * {{ OC }}u + ({{ oc4 }}) * 4u + {{ j }}u] = {{ ot }}({{ r }}[{{ j }}]);
                }
{% endfor %}
{% elif out_mode == "nchw" %}
{% for j in range(4) %}
                if (({{ oc4 }}) * 4u + {{ j }}u < {{ OC }}u) {
                    y[((n * {{ OC }}u + ({{ oc4 }}) * 4u + {{ j }}u) * {{ OH }}u + ({{ oy }})) * {{ OW }}u + ({{ ox }})] = {{ ot }}({{ r }}[{{ j }}]);
                }
{% endfor %}
{% else %}
{% for j in range(4) %}
                {
                    let c = ({{ oc4 }}) * 4u + {{ j }}u;
                    if (c < {{ OC }}u) {
{% if dcr %}
                        let by = c / {{ BS * CO }}u;
                        let bx = (c / {{ CO }}u) % {{ BS }}u;
                        let co = c % {{ CO }}u;
{% else %}
                        let co = c / {{ BS * BS }}u;
                        let by = (c / {{ BS }}u) % {{ BS }}u;
                        let bx = c % {{ BS }}u;
{% endif %}
                        y[((n * {{ CO }}u + co) * {{ OH * BS }}u + ({{ oy }}) * {{ BS }}u + by) * {{ OW * BS }}u + ({{ ox }}) * {{ BS }}u + bx] = {{ ot }}({{ r }}[{{ j }}]);
                    }
                }
{% endfor %}
{% endif %}
            }
{% endmacro %}

{# A convolution's epilogue (conv.cu, conv3d.cu, conv_transpose.cu, conv_tc.cu's compiled
   form), where `r` holds a value's sum plus its bias and `oc` its channel: a PRelu slope from
   the channel table (its OC a kernel argument in the GENERIC form), the activations, then a
   residual and what follows it (none in conv_transpose.cu). #}
{% if has_slope %}
        const float slope = chan[{% if GENERIC is defined and GENERIC %}(unsigned)g.OC{% else %}{{ OC }}u{% endif %} + oc];
{% endif %}
{% for e in epilogue %}
        r = {{ e }};
{% endfor %}
{% if residual is defined and residual %}
        // + the residual (an Add of a same-shaped tensor), then what follows the Add.
        r += {{ rload }};
{% for e in post %}
        r = {{ e }};
{% endfor %}
{% endif %}
